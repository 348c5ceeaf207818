"""What the CUDA-to-host mode needs to know about an op, decided without the emulated
device: where its result was asked to live, what it allocates (run on the meta device),
which ops allocate on their input's device, and the tensors among its arguments."""

from __future__ import annotations

from collections.abc import Iterator

import torch

_PLAIN = (torch.Tensor, torch.nn.Parameter)


def local(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor whose storage holds ``tensor``'s bytes on this rank: a DTensor's local
    shard (``_local_tensor``; a wrapper subclass's own storage is a placeholder of its
    global size), the tensor itself otherwise."""
    while type(tensor) not in _PLAIN:
        inner = getattr(tensor, "_local_tensor", None)
        if not isinstance(inner, torch.Tensor):
            return tensor
        tensor = inner
    return tensor


def host_device(device: object) -> object:
    if device is None:
        return None
    if isinstance(device, int):
        return torch.device("cpu")
    resolved = torch.device(device)  # type: ignore[arg-type]
    return torch.device("cpu") if resolved.type == "cuda" else resolved


def meta_device(device: object) -> object:
    return None if device is None else torch.device("meta")


LIKE = {
    torch.empty_like,
    torch.zeros_like,
    torch.ones_like,
    torch.full_like,
    torch.rand_like,
    torch.randn_like,
    torch.randint_like,
    torch.clone,
    torch.Tensor.clone,
    torch.Tensor.new_empty,
    torch.Tensor.new_zeros,
    torch.Tensor.new_ones,
    torch.Tensor.new_full,
    torch.Tensor.new_tensor,
    torch.Tensor.float,
    torch.Tensor.half,
    torch.Tensor.bfloat16,
    torch.Tensor.double,
    torch.Tensor.contiguous,
}
"""Ops that allocate a new tensor on their input's device: their result is device memory."""
UNWRITTEN = {torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty}
"""Allocations that leave memory untouched: touched on allocation, as cudaMalloc'd memory is
resident."""


def as_meta(value: object) -> object:
    if isinstance(value, torch.Tensor):
        value = local(value)  # a DTensor op allocates its local shard's bytes here
        return torch.empty_strided(value.size(), value.stride(), dtype=value.dtype, device="meta")
    if isinstance(value, (list, tuple)):
        return type(value)(as_meta(v) for v in value)
    return value


RETURNS_INPUT = -1
"""What :func:`meta_nbytes` says of an op that hands back its input."""


def meta_nbytes(func: object, args: tuple, kwargs: dict) -> int | None:
    """Bytes the op's result will need, from running it on the meta device (0 for an empty
    result, :data:`RETURNS_INPUT` for the input itself); None if unknown."""
    try:
        meta_args = tuple(as_meta(a) for a in args)
        meta_kwargs = {k: as_meta(v) for k, v in kwargs.items()}
        if "device" in meta_kwargs:
            meta_kwargs["device"] = meta_device(meta_kwargs["device"])
        out = func(*meta_args, **meta_kwargs)  # type: ignore[operator]
    except Exception:  # any op the meta device cannot run: size it after the fact
        return None
    outs = [
        o for o in (out if isinstance(out, (list, tuple)) else [out]) if isinstance(o, torch.Tensor)
    ]
    inputs = {t.untyped_storage()._cdata for t in tensor_args(meta_args, meta_kwargs)}
    fresh = [o for o in outs if o.untyped_storage()._cdata not in inputs]
    if outs and not fresh:
        return RETURNS_INPUT  # the input itself or views of it: nothing is allocated
    return sum(t.untyped_storage().nbytes() for t in fresh)


def tensor_args(args: tuple, kwargs: dict | None) -> Iterator[torch.Tensor]:
    for value in (*args, *(kwargs or {}).values()):
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (v for v in value if isinstance(v, torch.Tensor))


RESIZES = frozenset({torch.Tensor.resize_, torch.Tensor.resize_as_})
ROUTED = frozenset(
    {torch.Tensor.pin_memory, torch.Tensor.cpu, torch.Tensor.cuda, torch.Tensor.to, *RESIZES}
)
"""Ops that move tensors between host and device: always decided below."""


def fresh_copy(result: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """``result``, or a copy where it is ``source``'s own storage."""
    return result.clone() if same_storage(result, source) else result


def same_storage(result: object, tensor: torch.Tensor) -> bool:
    return (
        isinstance(result, torch.Tensor)
        and local(result).untyped_storage()._cdata == local(tensor).untyped_storage()._cdata
    )


def tensor_nbytes(tensor: torch.Tensor) -> int:
    tensor = local(tensor)
    return tensor.numel() * tensor.element_size()


def requested_place(func: object, args: tuple, kwargs: dict) -> str | None:
    """Where the caller asked the result to live: ``cuda``, ``cpu`` or None (unsaid)."""
    if func in (torch.Tensor.cpu, torch.Tensor.pin_memory) or kwargs.get("pin_memory"):
        return "cpu"
    if func is torch.Tensor.cuda:
        return "cuda"
    device = kwargs.get("device")  # ``Tensor.to`` arrives in keyword form (_to_keywords)
    if device is None:
        return None
    if isinstance(device, int):
        return "cuda"
    return "cuda" if torch.device(device).type == "cuda" else "cpu"


def is_device(value: object) -> bool:
    return isinstance(value, (str, int, torch.device)) and not isinstance(value, bool)
