"""A model's and optimizer's bytes by stable key, to judge a round trip bit for bit.

Keys are the parameter's name (``0.weight``), the optimizer moment under it
(``0.weight/exp_avg``) and module buffers (``buffer:scale``): stable across a round trip
whatever objects a strategy swaps. Values are copies of the local shards' bytes taken
before the offload; :func:`mismatches` names every key whose bytes, shape or dtype differ
after the load (a key that vanished or appeared counts). Until the engine's inventory
lands, this is the check the benchmark and the CPU tests use.
"""

from __future__ import annotations

from typing import Any

from offloadprobe.engines.fsdp2.strategies.common import local_tensor


def _tensors(model: Any, optimizer: Any | None) -> dict[str, Any]:
    import torch

    found = {name: local_tensor(p) for name, p in model.named_parameters()}
    found.update({f"buffer:{name}": b for name, b in model.named_buffers()})
    if optimizer is not None:
        names = {id(p): name for name, p in model.named_parameters()}
        for param, state in optimizer.state.items():
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    found[f"{names.get(id(param), '?')}/{key}"] = local_tensor(value)
    return found


def snapshot(model: Any, optimizer: Any | None = None) -> dict[str, Any]:
    """Host copies of every tensor's local bytes, by key (synchronizes first)."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
    with torch.no_grad():
        return {k: t.detach().to("cpu", copy=True) for k, t in _tensors(model, optimizer).items()}


def mismatches(before: dict[str, Any], model: Any, optimizer: Any | None = None) -> list[str]:
    """Keys whose bytes differ from ``before`` (compared as raw bytes: NaNs and -0.0 too)."""
    now = snapshot(model, optimizer)
    bad = sorted(set(before) ^ set(now))
    for key in sorted(set(before) & set(now)):
        if not _same(before[key], now[key]):
            bad.append(key)
    return sorted(bad)


def _same(a: Any, b: Any) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return not a.numel() or bool((_bytes(a) == _bytes(b)).all())


def _bytes(tensor: Any) -> Any:
    import torch

    return tensor.contiguous().view(-1).view(torch.uint8)


CHUNK = 1 << 26
"""Words per step of :func:`fingerprint` (bounds its device temporaries to 512 MiB)."""


def fingerprint(model: Any, optimizer: Any | None = None) -> dict[str, tuple[Any, ...]]:
    """Two sums of every tensor's words, by key, computed where the tensor lives: no host
    copy of the payload (the benchmark's host figures stay the strategy's). A change of
    any byte shows unless it keeps both the sum and the sum of squares (mod 2**64)."""
    import torch

    prints: dict[str, tuple[Any, ...]] = {}
    with torch.no_grad():
        for key, tensor in _tensors(model, optimizer).items():
            flat = tensor.detach().contiguous().view(-1).view(torch.uint8)
            words = flat.view(torch.int32) if flat.numel() % 4 == 0 else flat
            total = square = 0
            for start in range(0, words.numel(), CHUNK):
                part = words[start : start + CHUNK].to(torch.int64)
                total += int(part.sum())
                square += int((part * part).sum())
            prints[key] = (*tensor.shape, str(tensor.dtype), total, square % 2**64)
    return prints


def changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Keys whose fingerprints differ (or that exist on one side only)."""
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
