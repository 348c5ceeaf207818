"""The device ledger of one run: what is on the device after each offload, by totals, and
who the audit can name for it.

Taken at four moments: before the model exists (the zero), after the strategies were built
(what they made there), at each cycle's first offload start, and after the cycle's
offloads. After an offload, the process's device bytes over the zero are split into:

- the audit's owners (``param_data``, ``grad_data``, each optimizer key, originals kept
  aside, storages made during the offload): ``audit.py``;
- the probe's own batch;
- live Python tensors on the device that none of those reach (a copy in the strategy's own
  tensor, a module-level cache like TransformerEngine's FP8 workspaces), named by when they
  were made: before the first train step, during train, or during the cycles' moves;
- the framework's own live tensors: those the engine's inventory names its framework's
  (``Role.FRAMEWORK``), and device tensors that were there before the model was built
  (the no-offload reference's and the warm-up's, which megatron-core may keep alive: in
  the zero already), the same under every strategy. A device tensor the model's build
  made that the inventory does not name is device memory no part owns;
- the framework's residue: what no Python tensor holds at the first offload's start
  (cuBLAS workspaces, allocator internals), measured once and expected to stay;
- the rest, unattributed: device memory that appeared and nothing names (another
  allocator's: CuPy, a CUDA graph pool, the driver's count beyond PyTorch's reserved
  bytes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from offloadprobe.core.roles import Role
from offloadprobe.core.verdicts import GROWN, staging_allowance
from offloadprobe.engine.engine_state import inventory_of
from offloadprobe.engine.model.device_totals import DeviceTotal, device_total, walk
from offloadprobe.engine.optimizer.holdings import storage_key
from offloadprobe.engine.optimizer.own_state import OwnState
from offloadprobe.engine.runtime import emulation


@dataclass(frozen=True, slots=True)
class Hidden:
    """What an offload left on the device that no part of the model or optimizer owns."""

    unreferenced: dict[str, int]
    """Live tensors no part reaches, bytes by when they were made."""
    unattributed: int
    """Device bytes nothing names (beyond the framework's residue)."""
    outside_allocator: int
    """Of the device bytes, those outside PyTorch's allocator, over the first offload's."""
    residue: int
    """The framework's residue, expected to stay (measured at the first offload's start)."""
    left_total: int
    """All device bytes over the zero, after the offload."""


def _known_tensors(
    model: Any, own: OwnState | None, fresh: frozenset[int] = frozenset()
) -> list[Any]:
    """Every tensor the model's inventory names (``own``: a tensor that only hangs off
    the optimizer is none of its): parameters, gradients, optimizer state, the parts, the
    batch, what the engine names its framework's, but the storages in ``fresh``."""
    return [h.tensor for h in inventory_of(model, own) if storage_key(h.tensor) not in fresh]


def _known(
    model: Any, own: OwnState | None = None, fresh: frozenset[int] = frozenset()
) -> set[int]:
    return {storage_key(t) for t in _known_tensors(model, own, fresh)}


def framework_storages(model: Any, own: OwnState | None = None) -> frozenset[int]:
    """The storages the engine names its framework's (FSDP2's group buffers, megatron's
    global memory buffer)."""
    return frozenset(
        storage_key(h.tensor) for h in inventory_of(model, own) if h.role is Role.FRAMEWORK
    )


def _known_bytes(
    model: Any, own: OwnState | None = None, fresh: frozenset[int] = frozenset()
) -> tuple[int, int]:
    """``(named, grown)``: bytes of the model/optimizer/batch storages on the device now,
    each up to the end of the furthest tensor the audit knows on it, and the bytes of
    those storages beyond it (a storage grown under its tensors: room for a hidden copy)."""
    extent: dict[int, int] = {}
    size: dict[int, int] = {}
    for tensor in _known_tensors(model, own, fresh):
        if emulation.on_device(tensor):
            storage = tensor.untyped_storage()
            key = storage._cdata
            end = (tensor.storage_offset() + tensor.numel()) * tensor.element_size()
            size[key] = storage.nbytes()
            extent[key] = max(extent.get(key, 0), end)
    named = sum(min(size[k], extent[k]) for k in size)
    return named, sum(size.values()) - named


class DeviceLedger:
    """The run's device totals and the live tensors no part owns, moment by moment."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.zero: DeviceTotal = device_total(runtime)
        self.prior: set[int] = set(walk(set()))
        """Live device tensors before the model is built (in the zero)."""
        self.framework: dict[int, int] = {}
        """Of the live device tensors no part reaches once the model is built, before any
        strategy module is imported, those that were there before the build (a reference
        model megatron-core keeps alive), with their bytes then: the same under every
        strategy. Bytes they grow by later are not theirs. What the build made that the
        inventory does not name is not among them."""
        self.before_train: set[int] = set()
        self.before_moves: set[int] = set()
        self.first_offload: DeviceTotal | None = None
        self.built_untracked = 0
        """What construction made that no live tensor holds (another allocator's)."""
        self.residue = 0
        self.framework_before: frozenset[int] = frozenset()
        """The framework's storages at the current window's start (``at_window_start``)."""
        self.own = OwnState()
        """What the optimizer holds itself (``engine.optimizer.own_state``)."""

    def before(self, model: Any) -> tuple[DeviceTotal, set[int]]:
        """The moment after the model's build, before any strategy module is imported."""
        self.own.record(model.optimizer)
        walked = walk(_known(model, self.own))
        self.framework = {key: n for key, n in walked.items() if key in self.prior}
        self.prior = set()
        return device_total(self.runtime), set(walked)

    def after_construction(self, model: Any, before: tuple[DeviceTotal, set[int]]) -> int:
        """Device bytes the strategies made when they were built (held from then on)."""
        total, walked_before = before
        built = device_total(self.runtime)
        self.own.note_foreign(model.optimizer)
        walked = walk(_known(model, self.own))
        self.before_train = set(walked)
        made = max(0, built.total - total.total)
        in_tensors = sum(n for key, n in walked.items() if key not in walked_before)
        self.built_untracked = max(0, made - in_tensors)
        return made

    def at_offload_start(self, model: Any) -> None:
        """The first cycle's offload start: the framework's residue, and what was made."""
        if self.first_offload is not None:
            return
        now = device_total(self.runtime)
        walked = walk(_known(model, self.own))
        self.before_moves = set(walked)
        self.first_offload = now
        held = now.total - self.zero.total
        named = sum(_known_bytes(model, self.own)) + sum(walked.values()) + self.built_untracked
        self.residue = max(0, held - named)

    def at_window_start(self, model: Any) -> None:
        """Before a cycle's offloads: the storages the framework holds now. One it holds
        after them that it did not hold here was made during the offloads, where only
        a strategy's code ran: it is no framework's (a copy parked in its slot)."""
        self.framework_before = framework_storages(model, self.own)

    def after_offload(self, model: Any) -> Hidden:
        """The split of what is on the device after a cycle's offloads (see the module)."""
        now = device_total(self.runtime)
        fresh = framework_storages(model, self.own) - self.framework_before
        walked = walk(_known(model, self.own, fresh))
        known, grown = _known_bytes(model, self.own, fresh)
        by_when: dict[str, int] = {}
        for key, nbytes in walked.items():
            if key in self.framework:  # the framework's own, up to its size then
                grown += max(0, nbytes - self.framework[key])
                continue
            when = (
                "made before the first train step"
                if key in self.before_train
                else "made during train"
                if key in self.before_moves
                else "made during the offloads and loads"
            )
            by_when[when] = by_when.get(when, 0) + nbytes
        if grown:
            by_when[GROWN] = grown
        left = now.total - self.zero.total
        named = known + grown + sum(walked.values()) + self.built_untracked + self.residue
        first = self.first_offload or now
        return Hidden(
            unreferenced=by_when,
            unattributed=max(0, left - named),
            outside_allocator=max(0, now.outside - first.outside),
            residue=self.residue,
            left_total=left,
        )


def fact_fields(hidden: Hidden, served: int) -> dict[str, Any]:
    """The residency fact's ledger fields: what ``hidden`` names, and the staging allowance
    of a staging buffer serving a part of ``served`` bytes (``core.verdicts.served_bytes``)."""
    return {
        "unreferenced": hidden.unreferenced,
        "unattributed_bytes": hidden.unattributed,
        "outside_allocator_bytes": hidden.outside_allocator,
        "residue_bytes": hidden.residue,
        "left_total_bytes": hidden.left_total,
        "allowance_bytes": staging_allowance(served),
    }
