"""Bit-for-bit round-trip checks of the DDP buffers and of every optimizer tensor.

The fingerprint of a tensor is a keyed 64-bit hash of its raw bytes, read as 64-bit
words ``w``: per block of ``BLOCK`` words, ``s = sum(w[j] * R[j]) mod 2**64`` with ``R`` a
vector of random ODD 64-bit keys drawn from ``os.urandom`` once per process (one run);
each block sum is then put through a 64-bit finaliser (splitmix64's) together with its
block index and a second random key, and the results are summed. Properties:

- any change to one word (a single ULP, a flipped sign bit, a zeroed element) changes the
  fingerprint, always: ``delta * R[j]`` is never 0 mod 2**64 for an odd ``R[j]``;
- swaps and permutations, within a block or across blocks at any distance, change it except
  with probability about 2**-48 (the keys are secret to the strategy and new every run);
- the cost is one multiply and one sum per word, on the tensor's own device.

Metadata (dtype, shape, byte count) is part of every fingerprint.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch

from offloadprobe.engine.optimizer.holdings import holdings, storage_key
from offloadprobe.engine.runtime.emulation import real_device
from offloadprobe.engine.model.buffers import ddp_buffers, nbytes

BLOCK = 1 << 20
"""Words per keyed block (8 MiB of keys per device)."""
_STEP = 1 << 25
"""Words per pass (bounds the temporary product to 256 MiB)."""
_MASK64 = (1 << 64) - 1
_C1, _C2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _signed(value: int) -> int:
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


class FingerprintKey:
    """Random keys for one run: a block of odd 64-bit multipliers and a block-index key."""

    def __init__(self, seed: bytes | None = None, *, block: int = BLOCK) -> None:
        seed = seed if seed is not None else os.urandom(16)
        gen = torch.Generator().manual_seed(int.from_bytes(seed[:8], "little"))
        self.block = block
        low = torch.randint(0, 1 << 32, (block,), generator=gen, dtype=torch.int64)
        high = torch.randint(-(1 << 31), 1 << 31, (block,), generator=gen, dtype=torch.int64)
        self.multipliers = (high << 32) | low | 1
        self.index_key = _signed(int.from_bytes(seed[8:16], "little") | 1)
        self._on: dict[torch.device, torch.Tensor] = {}

    def on(self, device: torch.device) -> torch.Tensor:
        found = self._on.get(device)
        if found is None:
            found = self._on[device] = self.multipliers.to(device)
        return found


_RUN_KEY: FingerprintKey | None = None


def run_key() -> FingerprintKey:
    """This process's key (drawn on first use: one run, one key)."""
    global _RUN_KEY
    if _RUN_KEY is None:
        _RUN_KEY = FingerprintKey()
    return _RUN_KEY


def _shr(z: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 values."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def _finalise(z: torch.Tensor) -> torch.Tensor:
    z = (z ^ _shr(z, 30)) * _signed(_C1)
    z = (z ^ _shr(z, 27)) * _signed(_C2)
    return z ^ _shr(z, 31)


def _finalise_word(z: int) -> int:
    """:func:`_finalise` of one block sum (block index 0), on a Python integer."""
    z &= _MASK64
    z = ((z ^ (z >> 30)) * _C1) & _MASK64
    z = ((z ^ (z >> 27)) * _C2) & _MASK64
    return z ^ (z >> 31)


def _words(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as int64 words (zero-padded to a multiple of 8 bytes)."""
    raw = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
    pad = (-raw.numel()) % 8
    if pad:
        raw = torch.cat([raw, raw.new_zeros(pad)])
    if raw.storage_offset() % 8:
        raw = raw.clone()  # a view at an unaligned offset: read its bytes from a copy
    return raw.view(torch.int64)


def fingerprint(tensor: torch.Tensor, key: FingerprintKey | None = None) -> tuple[int, ...]:
    """(dtype, shape, bytes) and the keyed 64-bit hash of ``tensor``'s raw bytes.

    The arithmetic runs on the tensor's real device with ``__torch_function__`` off: it is
    this tool's own reading, not the code under test, and in CPU emulation every one of its
    ops would otherwise pass through the emulated device (its temporaries are plain host
    tensors either way)."""
    key = key or run_key()
    with torch._C.DisableTorchFunction():
        device = real_device(tensor)
        total = _keyed_sum(_words(tensor), key.on(device), key, device)
    meta = hash((str(tensor.dtype), tuple(tensor.shape))) & _MASK64
    return (meta, nbytes(tensor), total)


def _keyed_sum(
    words: torch.Tensor, mult: torch.Tensor, key: FingerprintKey, device: torch.device
) -> int:
    if device.type == "cpu":  # integer dot products: no temporary the size of the tensor
        return _keyed_sum_host(words, mult, key)
    return _keyed_sum_device(words, mult, key, device)


def _keyed_sum_device(
    words: torch.Tensor, mult: torch.Tensor, key: FingerprintKey, device: torch.device
) -> int:
    """Element-wise products summed per block (CUDA has no int64 ``mv``); at most ``_STEP``
    words per pass."""
    block = key.block
    if words.numel() <= block:  # one block (most optimizer tensors): finalise it here
        return _signed(_finalise_word(int((words * mult[: words.numel()]).sum())))
    step = max(_STEP // block, 1) * block
    total = torch.zeros((), dtype=torch.int64, device=device)  # summed on the device
    for start in range(0, words.numel(), step):
        part = words[start : start + step]
        full = part.numel() // block * block
        sums = []
        if full:
            sums.append((part[:full].view(-1, block) * mult).sum(dim=1))
        if part.numel() > full:
            tail = part[full:]
            sums.append((tail * mult[: tail.numel()]).sum().reshape(1))
        block_sums = torch.cat(sums) if len(sums) > 1 else sums[0]
        first = start // block
        index = torch.arange(first, first + block_sums.numel(), device=device)
        total = total + _finalise(block_sums + index * key.index_key).sum()
    return int(total)


def _keyed_sum_host(words: torch.Tensor, mult: torch.Tensor, key: FingerprintKey) -> int:
    """The same sum on the host, through ``torch.mv``/``torch.dot`` on int64 (wrapping, as
    the element-wise product does; integer sums do not depend on their order). An
    element-wise product would write a temporary as large as the tensor: page faults and
    three passes over memory instead of one."""
    block = key.block
    if words.numel() <= block:
        return _signed(_finalise_word(int(torch.dot(words, mult[: words.numel()]))))
    full = words.numel() // block * block
    sums = [torch.mv(words[:full].view(-1, block), mult)]
    if words.numel() > full:
        tail = words[full:]
        sums.append(torch.dot(tail, mult[: tail.numel()]).reshape(1))
    block_sums = torch.cat(sums) if len(sums) > 1 else sums[0]
    index = torch.arange(block_sums.numel())
    return int(_finalise(block_sums + index * key.index_key).sum())


@dataclass(frozen=True, slots=True)
class Fingerprints:
    """Everything a round trip must bring back: each DDP ``param_data`` and each optimizer
    tensor (not a DDP buffer's view, not a transient main-param gradient), in a fixed order."""

    buffers: list[tuple[int, ...]]
    optimizer: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)


def fingerprint_buffers(models: list[Any]) -> list[tuple[int, ...]]:
    """Fingerprint of every DDP buffer's ``param_data``, in buffer order."""
    return [fingerprint(b.param_data) for b in ddp_buffers(models)]


def _optimizer_tensors(model: Any) -> list[tuple[str, torch.Tensor]]:
    """Optimizer tensors to check, in holdings order: views into the DDP buffers and the
    gradients on the main params (rebuilt every step) are left out."""
    ddp = set()
    for buffer in ddp_buffers(model.chunks):
        ddp.add(storage_key(buffer.param_data))
        ddp.add(storage_key(buffer.grad_data))
    found = []
    for held in holdings([model.optimizer]):
        if held.owner.startswith("main_param.") or storage_key(held.tensor) in ddp:
            continue
        found.append((held.owner, held.tensor))
    return found


def fingerprint_state(model: Any) -> Fingerprints:
    """Fingerprint every DDP buffer and every optimizer tensor of ``model`` (before offload)."""
    optimizer = [(owner, fingerprint(t)) for owner, t in _optimizer_tensors(model)]
    return Fingerprints(buffers=fingerprint_buffers(model.chunks), optimizer=optimizer)


def _storage_ok(tensor: torch.Tensor) -> bool:
    return tensor.untyped_storage().size() >= nbytes(tensor)


def verify_round_trip(
    model: Any, before: Fingerprints, cycle: int, *, grads_zeroed: bool = True
) -> list[str]:
    """Problems found after a load; an empty list means every byte came back.

    ``grads_zeroed``: the strategy freed ``grad_data``, so load must hand it back zeroed.
    """
    problems = []
    for index, buffer in enumerate(ddp_buffers(model.chunks)):
        label = f"cycle {cycle}, buffer {index} ({buffer.param_data.dtype})"
        if not _storage_ok(buffer.param_data):
            problems.append(f"{label}: param_data storage was not restored by load")
            continue
        if index >= len(before.buffers) or fingerprint(buffer.param_data) != before.buffers[index]:
            problems.append(f"{label}: param_data differs from before offload")
        if not _storage_ok(buffer.grad_data):
            problems.append(f"{label}: grad_data storage was not restored by load")
        elif grads_zeroed and bool(buffer.grad_data.any()):
            problems.append(f"{label}: grad_data is not zero after load")
    problems += _verify_optimizer(model, before, cycle)
    return problems


def _verify_optimizer(model: Any, before: Fingerprints, cycle: int) -> list[str]:
    after = _optimizer_tensors(model)
    if [o for o, _ in after] != [o for o, _ in before.optimizer]:
        return [f"cycle {cycle}: the optimizer's state changed shape in the round trip "
                f"({len(before.optimizer)} tensors before, {len(after)} after)"]  # fmt: skip
    changed: dict[str, int] = {}
    for (owner, tensor), (_, want) in zip(after, before.optimizer, strict=True):
        if not _storage_ok(tensor):
            changed[f"{owner} (storage not restored)"] = changed.get(owner, 0) + 1
        elif fingerprint(tensor) != want:
            changed[owner] = changed.get(owner, 0) + 1
    return [
        f"cycle {cycle}: optimizer {owner} differs from before offload in {n} tensor(s)"
        for owner, n in changed.items()
    ]
