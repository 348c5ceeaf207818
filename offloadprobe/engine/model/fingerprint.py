"""A keyed 64-bit fingerprint of a tensor's raw bytes whose changes cannot cancel.

Construction. The bytes are read as little-endian 64-bit words ``w[0..n)`` (the last one
zero-padded). Two keys are drawn from ``os.urandom`` once per run: ``k0`` and an odd
``k1``. Every word is mixed with its position before it is added up::

    h = sum(F(w[i] ^ (k0 + i * k1)) for i in range(n))   (mod 2**64)

``F`` is splitmix64's finaliser (xor-shift 30, multiply, xor-shift 27, multiply, xor-shift
31): a bijection of 64-bit words in which every output bit depends non-linearly on every
input bit. The fingerprint is ``(hash of dtype and shape, byte count, h)``.

Properties, and what they rest on:

- One changed word (a ULP, a sign bit, a zeroed or negated element) is always caught:
  for a fixed position ``w -> F(w ^ p)`` is a bijection, so that term changes and no other.
- Several changed words (pairs, the same lane or bit in many words, a permutation,
  every k-th element negated, whole rows): ``h`` stays the same only if the changed
  terms' differences add up to 0 mod 2**64. Each term is ``F`` at a point moved by a
  secret offset that differs at every position (so a permutation changes what each word
  meets). Treating ``F`` at such points as a random function, that happens with
  probability about 2**-64 per comparison, whatever the pattern. This is a heuristic,
  not a proof: ``F`` is public and not cryptographic, only the offsets are secret. It is
  what the linear hash before it lacked: ``sum(w[i] * R[i])`` for odd ``R[i]`` moves by
  exactly 2**63 for every flip of bit 63, so any even number of them cancelled, always.
- The keys are fresh in every run and nothing a strategy is handed (models, optimizers,
  the runtime) reaches them. Code in the same process that reads offloadprobe's own
  internals can find them, as it could replace the check itself: the fingerprint guards
  against corruption, not against code written to forge it.
- The same bytes give the same value on the host and on a GPU: the same integer
  arithmetic mod 2**64, by numpy ``uint64`` ufuncs over fixed-size chunks on the host (no
  temporary larger than a chunk), a fused Triton kernel on CUDA
  (:mod:`offloadprobe.engine.model.fingerprint_triton`) and plain torch ``int64`` ops
  where Triton is not installed.
- Cost: on CUDA one read of the tensor and a few integer operations per word in
  registers (``benchmarks/fingerprint_cost.py`` times it against a pinned load); on the
  host about ten numpy passes over each cache-sized chunk, 1.5-2 GB/s per thread here
  (the linear hash's int64 ``mv`` ran about 8 GB/s), split over torch's intra-op threads
  for large tensors.
"""

from __future__ import annotations

import ctypes
import os
import warnings
from collections.abc import Iterable
from typing import Any

import torch

from offloadprobe.engine.runtime.emulation import real_device

MASK = (1 << 64) - 1
C1, C2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
SHIFTS = (30, 27, 31)
HOST_CHUNK = 1 << 16
"""Words per host chunk (512 KiB): the scratch stays in the cache."""
HOST_WORDS_PER_THREAD = 1 << 21
"""Host tensors this many words (16 MiB) per thread or more are split over torch's threads."""
DEVICE_STEP = 1 << 22
"""Words per pass of the torch-ops fallback, and per staging copy of an unaligned tensor."""


def _signed(value: int) -> int:
    value &= MASK
    return value - (1 << 64) if value >= 1 << 63 else value


def mix(word: int, index: int, k0: int, k1: int) -> int:
    """``F(word ^ (k0 + index * k1))`` of one word, on Python integers (the definition)."""
    z = (word & MASK) ^ ((k0 + index * k1) & MASK)
    z ^= z >> SHIFTS[0]
    z = (z * C1) & MASK
    z ^= z >> SHIFTS[1]
    z = (z * C2) & MASK
    return z ^ (z >> SHIFTS[2])


class FingerprintKey:
    """One run's secret offsets ``k0`` and odd ``k1`` (``seed``: fixed keys, for tests)."""

    __slots__ = ("_k0", "_k1", "_on", "_table", "chunk")

    def __init__(self, seed: bytes | None = None, *, chunk: int = HOST_CHUNK) -> None:
        seed = os.urandom(16) if seed is None else seed
        if len(seed) < 16:
            raise ValueError("a fingerprint key needs 16 bytes of seed")
        self._k0 = int.from_bytes(seed[:8], "little")
        self._k1 = int.from_bytes(seed[8:16], "little") | 1
        self.chunk = chunk
        self._table: Any = None
        self._on: dict[torch.device, torch.Tensor] = {}

    def __repr__(self) -> str:
        return "FingerprintKey(<secret>)"

    def offset(self, index: int) -> int:
        """``k0 + index * k1`` mod 2**64."""
        return (self._k0 + index * self._k1) & MASK

    def mix(self, word: int, index: int) -> int:
        return mix(word, index, self._k0, self._k1)

    def host_table(self) -> Any:
        """``j * k1`` for ``j < chunk``, as numpy ``uint64`` (the in-chunk part of the offset)."""
        if self._table is None:
            import numpy as np

            self._table = np.arange(self.chunk, dtype=np.uint64) * np.uint64(self._k1)
        return self._table

    def on(self, device: torch.device) -> torch.Tensor:
        """``[k0, k1, C1, C2]`` as int64 on ``device`` (the kernel reads them as uint64)."""
        found = self._on.get(device)
        if found is None:
            words = [_signed(v) for v in (self._k0, self._k1, C1, C2)]
            found = self._on[device] = torch.tensor(words, dtype=torch.int64, device=device)
        return found


_KEY: list[FingerprintKey] = []


def run_key() -> FingerprintKey:
    """This process's key, drawn on first use (one run, one key)."""
    if not _KEY:
        _KEY.append(FingerprintKey())
    return _KEY[0]


# ---------------------------------------------------------------- host: numpy uint64


def host_sum(words: Any, first: int, key: FingerprintKey) -> int:
    """Sum of the mixed words of numpy ``uint64`` array ``words`` (any alignment), word 0
    at position ``first``; chunked, two chunk-sized scratch arrays, no larger temporary."""
    import numpy as np

    table, chunk = key.host_table(), key.chunk
    z = np.empty(min(chunk, words.size), dtype=np.uint64)
    t = np.empty_like(z)
    c1, c2 = np.uint64(C1), np.uint64(C2)
    s1, s2, s3 = (np.uint64(s) for s in SHIFTS)
    total = 0
    for start in range(0, words.size, chunk):
        part = words[start : start + chunk]
        zz, tt = z[: part.size], t[: part.size]
        np.add(table[: part.size], np.uint64(key.offset(first + start)), out=zz)
        np.bitwise_xor(zz, part, out=zz)
        np.bitwise_xor(zz, np.right_shift(zz, s1, out=tt), out=zz)
        np.multiply(zz, c1, out=zz)
        np.bitwise_xor(zz, np.right_shift(zz, s2, out=tt), out=zz)
        np.multiply(zz, c2, out=zz)
        np.bitwise_xor(zz, np.right_shift(zz, s3, out=tt), out=zz)
        total += int(np.add.reduce(zz))
    return total & MASK


def _host_sum_threaded(words: Any, key: FingerprintKey) -> int:
    """:func:`host_sum` over torch's intra-op thread count (numpy releases the GIL), for
    tensors of ``HOST_WORDS_PER_THREAD`` words per thread or more; the threads last one call."""
    threads = min(torch.get_num_threads(), words.size // HOST_WORDS_PER_THREAD)
    if threads < 2:
        return host_sum(words, 0, key)
    from concurrent.futures import ThreadPoolExecutor

    key.host_table()  # made once, before the threads read it
    share = -(-words.size // threads // key.chunk) * key.chunk
    with ThreadPoolExecutor(threads, thread_name_prefix="offloadprobe-fingerprint") as pool:
        starts = range(0, words.size, share)
        jobs = [pool.submit(host_sum, words[s : s + share], s, key) for s in starts]
        return sum(job.result() for job in jobs) & MASK


def _host_bytes(raw: torch.Tensor, np: Any) -> Any:
    """``raw``'s bytes as a numpy uint8 array over the same memory. Not ``Tensor.numpy()``:
    that marks the storage not resizable, and the strategies free and restore it."""
    if raw.numel() == 0:
        return np.zeros(0, dtype=np.uint8)
    memory = (ctypes.c_uint8 * raw.numel()).from_address(raw.data_ptr())
    return np.frombuffer(memory, dtype=np.uint8)


def _host_total(raw: torch.Tensor, key: FingerprintKey) -> int:
    """Fingerprint sum of the host bytes ``raw`` (uint8, 1-D, contiguous)."""
    full = raw.numel() // 8
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy comes with torch almost everywhere
        return int(_device_total(raw, key)) & MASK
    data = _host_bytes(raw, np)
    total = _host_sum_threaded(data[: full * 8].view(np.uint64), key) if full else 0
    if raw.numel() > full * 8:
        tail = data[full * 8 :].tobytes().ljust(8, b"\0")
        total += key.mix(int.from_bytes(tail, "little"), full)
    return total & MASK


# ---------------------------------------------------------------- device: Triton or torch


def torch_sum(words: torch.Tensor, first: int, key: FingerprintKey) -> torch.Tensor:
    """The same sum with torch int64 ops, on ``words``' device (0-d int64, wrapped): the
    fallback where Triton is absent. Temporaries of ``DEVICE_STEP`` words per pass."""
    total = torch.zeros((), dtype=torch.int64, device=words.device)
    k1 = _signed(key.offset(1) - key.offset(0))
    for start in range(0, words.numel(), DEVICE_STEP):
        part = words[start : start + DEVICE_STEP]
        z = torch.arange(part.numel(), dtype=torch.int64, device=words.device)
        z.mul_(k1).add_(_signed(key.offset(first + start))).bitwise_xor_(part)
        for shift, factor in zip(SHIFTS, (C1, C2, None), strict=True):
            z.bitwise_xor_((z >> shift).bitwise_and_((1 << (64 - shift)) - 1))
            if factor is not None:
                z.mul_(_signed(factor))
        total += z.sum()
    return total


_KERNEL: list[Any] = []


def _triton() -> Any:
    """The Triton kernel module, or None where Triton cannot be imported (tried once)."""
    if not _KERNEL:
        try:
            from offloadprobe.engine.model import fingerprint_triton as kernel
        except ImportError:
            kernel = None
        except Exception as exc:  # a Triton that is installed but cannot load here
            message = f"fingerprint: Triton failed to import ({exc!r}); using torch ops"
            warnings.warn(message, RuntimeWarning, stacklevel=2)
            kernel = None
        _KERNEL.append(kernel)
    return _KERNEL[0]


def backend(device: torch.device) -> str:
    """Which code computes the sums on ``device``: ``numpy``, ``triton`` or ``torch``."""
    if device.type == "cpu":
        return "numpy"
    return "triton" if device.type == "cuda" and _triton() is not None else "torch"


def _words_sum(words: torch.Tensor, first: int, key: FingerprintKey) -> torch.Tensor:
    kernel = _triton() if words.device.type == "cuda" else None
    if kernel is not None:
        try:
            return kernel.keyed_sum(words, first, key.on(words.device))
        except Exception as exc:  # a Triton that imports but cannot compile here
            _KERNEL[0] = None
            message = f"fingerprint: the Triton kernel failed ({exc!r}); using torch ops"
            warnings.warn(message, RuntimeWarning, stacklevel=2)
    return torch_sum(words, first, key)


def _device_total(raw: torch.Tensor, key: FingerprintKey) -> torch.Tensor:
    """Fingerprint sum of device bytes ``raw`` (uint8, 1-D, contiguous), left on the device
    (0-d int64). An unaligned view is staged through one ``DEVICE_STEP``-word buffer."""
    full = raw.numel() // 8
    parts = []
    if full and raw.storage_offset() % 8 == 0:
        parts.append(_words_sum(raw[: full * 8].view(torch.int64), 0, key))
    elif full:
        stage = torch.empty(min(full, DEVICE_STEP) * 8, dtype=torch.uint8, device=raw.device)
        for start in range(0, full, DEVICE_STEP):
            count = min(DEVICE_STEP, full - start)
            stage[: count * 8].copy_(raw[start * 8 : (start + count) * 8])
            parts.append(_words_sum(stage[: count * 8].view(torch.int64), start, key))
    if raw.numel() > full * 8:
        pad = torch.zeros(8, dtype=torch.uint8, device=raw.device)
        pad[: raw.numel() - full * 8].copy_(raw[full * 8 :])
        parts.append(_words_sum(pad.view(torch.int64), full, key))
    if not parts:
        return torch.zeros((), dtype=torch.int64, device=raw.device)
    return torch.stack(parts).sum()


# ---------------------------------------------------------------- public


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes in element order, as a 1-D uint8 view (a non-contiguous tensor,
    which no DDP buffer or optimizer state is, is copied first)."""
    return tensor.detach().contiguous().reshape(-1).view(torch.uint8)


def fingerprints(
    tensors: Iterable[torch.Tensor], key: FingerprintKey | None = None
) -> list[tuple[int, int, int]]:
    """``(hash of dtype and shape, bytes, keyed sum)`` of each tensor, in order. Device sums
    are started for all of them first and read back together (one synchronisation).

    The arithmetic runs on each tensor's real device with ``__torch_function__`` off: it is
    this tool's own reading, not the code under test (in CPU emulation every op would
    otherwise pass through the emulated device)."""
    key = key or run_key()
    metas, sums, on_device = [], [], []
    with torch._C.DisableTorchFunction():
        for tensor in tensors:
            raw = _bytes(tensor)
            metas.append((hash((str(tensor.dtype), tuple(tensor.shape))) & MASK, raw.numel()))
            if real_device(tensor).type == "cpu":
                sums.append(_host_total(raw, key))
            else:
                on_device.append((len(sums), _device_total(raw, key)))
                sums.append(0)
        for device in {t.device for _, t in on_device}:
            mine = [(i, t) for i, t in on_device if t.device == device]
            read = torch.stack([t for _, t in mine]).tolist()  # one copy per device
            for (index, _), value in zip(mine, read, strict=True):
                sums[index] = value & MASK
    return [(meta, size, total) for (meta, size), total in zip(metas, sums, strict=True)]


def fingerprint(tensor: torch.Tensor, key: FingerprintKey | None = None) -> tuple[int, ...]:
    """``(hash of dtype and shape, bytes, keyed sum)`` of ``tensor``'s raw bytes."""
    return fingerprints([tensor], key)[0]
