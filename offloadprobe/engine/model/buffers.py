"""The DDP buffers of megatron's model chunks, and how a strategy frees and restores them.

Torch-free at import: every helper works on the tensors it is given, so strategy
modules that use them stay importable without torch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from offloadprobe.engine.optimizer.holdings import storage_key


def ddp_buffers(models: list[Any]) -> Iterator[Any]:
    """Every ``_ParamAndGradBuffer`` of every chunk, dense then expert-parallel; a chunk
    that is not DDP-wrapped (a reference model: its ``buffers`` is ``Module.buffers``)
    has none."""
    for chunk in models:
        for attr in ("buffers", "expert_parallel_buffers"):
            found = getattr(chunk, attr, None)
            if isinstance(found, (list, tuple)):
                yield from found


def loose_parameters(models: list[Any]) -> list[Any]:
    """The storages of the chunks' parameters that live outside every DDP buffer, each
    once, as one flat byte tensor over it (from byte 0 to the last byte any parameter
    views): frozen parameters of a DDP-wrapped chunk (DDP buffers only what needs a
    gradient, so LoRA's base weights stay apart) and every parameter of a chunk that is
    not wrapped (a reference model). Frameworks move parameters one by one
    (``param.data``); moving the storage whole keeps every parameter that views it
    (several views of one flat tensor, one at a storage offset, a transposed one) and
    frees exactly what comes back. ``storage_key`` names a storage across calls (the flat
    tensors are new at every call)."""
    inside = {storage_key(b.param_data) for b in ddp_buffers(models)}
    owner: dict[int, Any] = {}
    extent: dict[int, int] = {}
    for chunk in models:
        parameters = getattr(chunk, "parameters", None)
        if parameters is None:  # not a module (a test's stand-in holding buffers only)
            continue
        for param in parameters():
            key = storage_key(param)
            if key not in inside:
                owner.setdefault(key, param)
                extent[key] = max(extent.get(key, 0), _last_byte(param))
    return [_whole(owner[key], extent[key]) for key in owner]


_WHOLE: Any = None
"""Each loose storage's flat tensor by its first parameter (weakly: it goes with it)."""
"""The key of a loose storage's host copy (the flat tensors are new at every call)."""


def _last_byte(tensor: Any) -> int:
    """One past the last byte of its storage that ``tensor`` views."""
    if tensor.numel() == 0:
        return 0
    pairs = zip(tensor.shape, tensor.stride(), strict=True)
    span = sum((size - 1) * stride for size, stride in pairs)
    return (tensor.storage_offset() + span + 1) * tensor.element_size()


def _whole(param: Any, length: int) -> Any:
    """A flat ``uint8`` tensor over the first ``length`` bytes of ``param``'s storage, made
    while the storage holds them and kept for when it is freed (``Tensor.set_`` over a
    freed storage would allocate it behind the device's accounting). A storage first seen
    freed comes back as the parameter itself."""
    import torch

    global _WHOLE
    if _WHOLE is None:
        from torch.utils.weak import WeakIdKeyDictionary

        _WHOLE = WeakIdKeyDictionary()
    cached = _WHOLE.get(param)
    same = cached is not None and storage_key(cached) == storage_key(param)
    if same and cached.numel() == length:
        return cached
    if param.untyped_storage().nbytes() < length:
        return param
    flat = param.detach().new_empty((0,), dtype=torch.uint8)
    flat.set_(param.untyped_storage(), 0, (length,))
    _WHOLE[param] = flat
    return flat


def loose_to_offload(models: list[Any]) -> list[Any]:
    """Loose parameters an offload moves: those holding their storage."""
    return [p for p in loose_parameters(models) if p.untyped_storage().size()]


def loose_to_load(models: list[Any]) -> list[Any]:
    """Loose parameters a load restores: those whose storage an offload freed."""
    return [p for p in loose_parameters(models) if nbytes(p) and is_freed(p)]


def to_offload(models: list[Any]) -> list[Any]:
    """The DDP buffers an offload moves: those whose ``param_data`` holds its storage. An
    offload of what is already offloaded moves nothing (the sequences' invariant)."""
    return [b for b in ddp_buffers(models) if b.param_data.untyped_storage().size()]


def to_load(models: list[Any]) -> list[Any]:
    """The DDP buffers a load restores: those whose ``param_data`` storage an offload
    freed. A load of what is on the device restores nothing (the sequences' invariant)."""
    return [b for b in ddp_buffers(models) if nbytes(b.param_data) and is_freed(b.param_data)]


def is_freed(tensor: Any) -> bool:
    """Whether a buffer's storage was freed in place (``free_storage``)."""
    return tensor.untyped_storage().size() == 0


def nbytes(tensor: Any) -> int:
    """Logical bytes of a tensor (its storage may be freed)."""
    return int(tensor.numel() * tensor.element_size())


def free_storage(tensor: Any) -> None:
    """Release a buffer's storage while every view into it stays a valid object."""
    tensor.untyped_storage().resize_(0)


def restore_storage(tensor: Any) -> None:
    """Give a freed buffer its storage back (contents undefined until written): up to the
    tensor's last byte, its storage offset included (a DDP buffer's is 0; a parameter
    that is a view into a larger storage must not be written past the end)."""
    storage = tensor.untyped_storage()
    if storage.size() == 0:
        storage.resize_((tensor.storage_offset() + tensor.numel()) * tensor.element_size())


def restore_zeroed_grads(buffer: Any) -> None:
    """Reallocate ``grad_data`` and zero it, as a fresh phase expects."""
    restore_storage(buffer.grad_data)
    buffer.grad_data.zero_()


def megatron_version() -> str:
    """The installed megatron-core's version string (``unknown`` if it does not say)."""
    try:
        from megatron.core import package_info

        return str(package_info.__version__)
    except ImportError:
        return "unknown"


def require_methods(cls: type, methods: tuple[str, ...], what: str) -> None:
    """Raise a usage error naming the megatron-core version when ``cls`` lacks a method."""
    from offloadprobe.core.errors import StrategyError

    missing = [name for name in methods if not callable(getattr(cls, name, None))]
    if missing:
        raise StrategyError(
            f"megatron-core {megatron_version()} has no {what}."
            + " and ".join(f"{m}()" for m in missing)
            + ": install a megatron-core that has it (0.16 or newer) or choose another strategy"
        )
