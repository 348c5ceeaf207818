"""Residency audit: which model and optimizer tensors are still on the device after offload.

Take :func:`snapshot_device_storage` just before an offload and call :func:`audit` right
after it. Every tensor of the model's inventory (``engine_state``; megatron's:
``engine/model/inventory.py``) but what stays by design (the batch, what the engine names
its framework's) that still occupies device memory comes back as a
:class:`ResidentTensor`, named by its owner in the engine's words and, where the engine
says so, by the model parameter it belongs to.

"Still on the device" is decided by where the bytes live, never by who references them or
how they were made: on CUDA, ``is_cuda`` with allocated storage; in CPU emulation,
allocated storage registered with the emulated device (``runtime/device_memory.py``), which
knows every storage made through the emulation's CUDA path. A tensor a strategy copied to a
*new* device tensor is found the same way on both.

Views are reported once per storage: a tensor viewing a storage already reported (a main
grad inside ``grad_data``) names it in ``alias_of`` and adds no bytes. Original device
storages that nothing reachable references any more but that are still allocated (a
strategy kept the device tensor while replacing it in the state) come back with
``referenced=False``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from offloadprobe.core.roles import Role
from offloadprobe.engine.engine_state import inventory_of
from offloadprobe.engine.model.buffers import nbytes
from offloadprobe.engine.optimizer.holdings import storage_key
from offloadprobe.engine.optimizer.own_state import OwnState
from offloadprobe.engine.runtime import Runtime, emulation


@dataclass(frozen=True, kw_only=True, slots=True)
class ResidentTensor:
    """A model or optimizer tensor whose device memory an offload did not release."""

    owner: str
    """The inventory's owner, in the engine's words (megatron: ``param_data``/``grad_data``,
    a state key such as ``exp_avg`` or ``master_param``, ``<key>.scale``, an fp32 group's
    attribute, ``main_param.grad``)."""
    param_name: str | None
    """Model parameter the tensor belongs to (``decoder.layers.0.mlp.linear_fc1.weight``);
    None for whole DDP buffers and where the optimizer's groups do not say."""
    dtype: str
    """``float32``, ``bfloat16``, ``int16`` ..."""
    nbytes: int
    """Logical bytes of the tensor (elements x element size)."""
    alias_of: str | None = None
    """Owner of an earlier record whose storage this tensor views: its bytes count there."""
    referenced: bool = True
    """False: neither the model nor the optimizer reaches it any more, yet it is allocated."""


@dataclass(frozen=True, slots=True)
class _Original:
    ref: StorageWeakRef
    owner: str
    param_name: str | None
    dtype: str
    nbytes: int


@dataclass(slots=True)
class DeviceSnapshot:
    """Weak references to every device storage of the model and its optimizer before offload."""

    originals: dict[int, _Original] = field(default_factory=dict)
    registered: set[int] = field(default_factory=set)
    """CPU emulation: keys of every emulated device storage before the offload."""

    def holds(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor``'s storage is one recorded here and still alive."""
        original = self.originals.get(storage_key(tensor))
        return original is not None and not original.ref.expired()


@dataclass(frozen=True, slots=True)
class _Entry:
    owner: str
    param_name: str | None
    tensor: torch.Tensor


STAYS = (Role.BATCH, Role.FRAMEWORK)
"""Roles that stay on the device by design: not the audit's."""


def _entries(model: Any, own: OwnState | None = None) -> Iterator[_Entry]:
    """The inventory's holdings in its order but what stays by design (``own``: see
    ``engine.optimizer.own_state``; a tensor that only hangs off the optimizer is none of
    its), each with a parameter name where the engine gives one."""
    holdings = [h for h in inventory_of(model, own) if h.role not in STAYS]
    labels = _labels(model)
    for holding in holdings:
        yield _Entry(holding.owner, labels.get(holding.key), holding.tensor)


def _labels(model: Any) -> dict[str, str]:
    method = getattr(model, "labels", None)
    if method is not None:
        return dict(method())
    from offloadprobe.engine.model.inventory import labels

    return labels(model)


def _dtype(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def snapshot_device_storage(model: Any, own: OwnState | None = None) -> DeviceSnapshot:
    """Record (weakly) every device storage the model's DDP buffers and optimizer hold now."""
    snapshot = DeviceSnapshot()
    memory = emulation.active()
    if memory is not None:
        snapshot.registered = {s._cdata for s in memory.storages()}
    for entry in _entries(model, own):
        storage = entry.tensor.untyped_storage()
        key = storage._cdata
        if not emulation.on_device(entry.tensor) or key in snapshot.originals:
            continue
        snapshot.originals[key] = _Original(
            StorageWeakRef(storage),
            entry.owner,
            entry.param_name,
            _dtype(entry.tensor),
            nbytes(entry.tensor),
        )
    return snapshot


def audit(
    model: Any,
    runtime: Runtime,
    snapshot: DeviceSnapshot,
    released: frozenset[int] = frozenset(),
    own: OwnState | None = None,
) -> list[ResidentTensor]:
    """Every model/optimizer tensor still occupying device memory, one record per tensor.

    ``released``: storage keys the driver confirmed it got back outside PyTorch's
    allocator (see ``ReleasesThroughDriver``); those occupy no device memory. ``own``:
    what the optimizer made itself; a tensor that only hangs off it is no part's."""
    found: list[ResidentTensor] = []
    reached: dict[int, str] = {}
    counted: dict[int, int] = {}
    for entry in _entries(model, own):
        key = storage_key(entry.tensor)
        first = reached.get(key)
        reached.setdefault(key, entry.owner)
        if key in released or not runtime.on_device(entry.tensor):
            continue
        size = nbytes(entry.tensor)
        # disjoint views of one owner's storage (FSDP2's gradients share one flat buffer
        # per fully_shard) each count, up to the storage's bytes; any other view is an alias
        room = entry.tensor.untyped_storage().nbytes() - counted.get(key, 0)
        if first == entry.owner and size <= room:
            first = None
        if first is None:
            counted[key] = counted.get(key, 0) + size
        found.append(
            ResidentTensor(
                owner=entry.owner,
                param_name=entry.param_name,
                dtype=_dtype(entry.tensor),
                nbytes=size,
                alias_of=first,
            )
        )
    memory = runtime.device_memory
    if memory is not None:
        return found + _unreached_emulated(memory, reached, snapshot)
    for key, original in snapshot.originals.items():
        if key in reached or original.ref.expired():
            continue
        storage = torch.UntypedStorage._new_with_weak_ptr(original.ref.cdata)
        if storage.nbytes() and storage.device.type == "cuda":
            found.append(
                ResidentTensor(
                    owner=original.owner,
                    param_name=original.param_name,
                    dtype=original.dtype,
                    nbytes=original.nbytes,
                    referenced=False,
                )
            )
    return found


ALLOCATED_DURING_OFFLOAD = "allocated during offload"
"""The owner of device storages an offload made and nothing in the model reaches."""


def optimizer_bytes_left(left: dict[str, int], roles: dict[str, str]) -> int:
    """Of what an offload left (``bytes_by_key``), the optimizer state's bytes (the owners
    whose role, in ``roles`` (``engine_state.owner_roles``), is optimizer state)."""
    return sum(v for k, v in left.items() if roles.get(k) == Role.OPTIMIZER.value)


def _unreached_emulated(memory: Any, reached: dict[int, str], snapshot: DeviceSnapshot) -> list:
    """Emulated device storages still allocated that the model and optimizer no longer reach:
    originals a strategy kept aside, and device storages it allocated during the offload."""
    found = []
    for storage in memory.storages():
        key = storage._cdata
        if key in reached or not storage.nbytes():
            continue
        original = snapshot.originals.get(key)
        if original is not None:
            found.append(
                ResidentTensor(
                    owner=original.owner,
                    param_name=original.param_name,
                    dtype=original.dtype,
                    nbytes=original.nbytes,
                    referenced=False,
                )
            )
        elif key not in snapshot.registered:
            found.append(
                ResidentTensor(
                    owner=ALLOCATED_DURING_OFFLOAD,
                    param_name=None,
                    dtype="uint8",
                    nbytes=storage.nbytes(),
                    referenced=False,
                )
            )
    return found


def bytes_by_key(records: list[ResidentTensor]) -> dict[str, int]:
    """Resident bytes per owner, each storage counted once (aliases add nothing)."""
    totals: dict[str, int] = {}
    for record in records:
        if record.alias_of is None:
            totals[record.owner] = totals.get(record.owner, 0) + record.nbytes
    return totals


def optimizer_state_bytes_by_key(model: Any, own: OwnState | None = None) -> dict[str, int]:
    """Bytes the optimizer itself holds on the device, per owner (the denominator of
    "left behind x optimizer-state bytes"): every device tensor of the inventory's
    optimizer state (``own``: as the optimizer made them, at the sizes it made them) whose
    storage is not a parameter's or a gradient's, each storage once. Logical sizes, so it
    reads the same before and after an offload."""
    holdings = inventory_of(model, own)
    model_roles = (Role.PARAMETERS, Role.GRADIENTS)
    seen = {storage_key(h.tensor) for h in holdings if h.role in model_roles}
    totals: dict[str, int] = {}
    for held in (h for h in holdings if h.role is Role.OPTIMIZER):
        key = storage_key(held.tensor)
        if not emulation.on_device(held.tensor) or key in seen:
            continue
        seen.add(key)
        totals[held.owner] = totals.get(held.owner, 0) + nbytes(held.tensor)
    return totals
