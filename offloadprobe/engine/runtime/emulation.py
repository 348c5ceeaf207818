"""CPU emulation of the CUDA calls megatron-core makes, for hosts without a GPU.

megatron-core allocates DDP buffers on ``torch.cuda.current_device()``, creates
optimizer scalars with ``device='cuda'``, sorts parameters by ``Tensor.type()``
names such as ``torch.cuda.BFloat16Tensor`` and forks CUDA RNG states. On a CPU-only
host these shims let the *same* megatron objects build and train with every
"device" tensor in host memory. Nothing here pretends to measure a GPU: there is no
pinned memory, a "pin" is an ordinary host copy, and the run says so.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator
from unittest import mock

import torch
from torch.overrides import TorchFunctionMode

from offloadprobe.engine.runtime import glibc_malloc, host_gemm
from offloadprobe.engine.runtime.device_memory import _ORIGINAL_RESIZE, DeviceMemory
from offloadprobe.engine.runtime.emulated_ops import (
    LIKE,
    RESIZES,
    RETURNS_INPUT,
    ROUTED,
    UNWRITTEN,
    fresh_copy,
    host_device,
    is_device,
    local,
    meta_nbytes,
    requested_place,
    same_storage,
    tensor_args,
    tensor_nbytes,
)
from offloadprobe.engine.runtime.glibc_malloc import trim_host_heap  # noqa: F401 (callers)
from offloadprobe.engine.runtime.unmoded import hooks_under

NOTE = (
    "CPU emulation: no pinned memory, no GPU readings; emulated device memory is a "
    "constant part of RSS (device storages + ballast), taken out of every host figure"
)


ACTIVE: DeviceMemory | None = None
"""The emulated device's memory while :func:`emulated_device` is active (under
``cuda_shims.cuda_on_host`` in a run)."""


def active() -> DeviceMemory | None:
    return ACTIVE


def on_device(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` occupies device memory right now: ``is_cuda`` on a GPU, the
    emulated device's registry in CPU emulation (by fact, never by who references it)."""
    if tensor.is_cuda:
        return local(tensor).untyped_storage().nbytes() > 0
    return ACTIVE is not None and ACTIVE.resident(tensor)


class _CudaToHost(TorchFunctionMode):
    """Run megatron's CUDA calls on the host, every device allocation through the
    emulated device's memory (:class:`DeviceMemory`).

    A tensor is on the device when its storage is registered there, whoever references it.
    ``.cuda()``/``.to(cuda)`` of a host tensor makes a registered copy; ``.cpu()``/
    ``.to("cpu")`` of a device tensor makes a host copy; either is a no-op when the tensor
    is already where it is asked to be. Factories asked for a CUDA device, and ``*_like``,
    ``clone``, ``new_*`` and dtype conversions of device tensors, allocate device memory.
    Pinning is an ordinary host copy (no page-locked memory here).
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if (
            func not in ROUTED
            and (not kwargs or ("device" not in kwargs and "pin_memory" not in kwargs))
            and (func not in LIKE or not _held(args))
        ):
            # no device asked for and nothing derived from a device tensor: a plain op
            if _STRATEGY_CODE and _reads_device(args, kwargs):
                return _device_op(func, args, kwargs or {})
            if func in host_gemm.GEMMS:
                return host_gemm.matmul(func, args, kwargs)
            return func(*args, **(kwargs or {}))
        kwargs = dict(kwargs or {})
        if func in RESIZES:
            return _resize_tensor(func, args, kwargs)
        if func is torch.Tensor.to:
            args, kwargs = _to_keywords(args, kwargs)
        memory = ACTIVE
        target = requested_place(func, args, kwargs)
        source = args[0] if args and isinstance(args[0], torch.Tensor) else None
        on_dev = memory is not None and source is not None and memory.holds(source)
        moving = func is torch.Tensor.pin_memory or (
            func in (torch.Tensor.cpu, torch.Tensor.cuda, torch.Tensor.to)
            and target is not None
            and (target == "cuda") != on_dev
        )
        if moving and source is not None:
            _require_storage(source)
        if func is torch.Tensor.pin_memory:
            return args[0].clone()
        if func in (torch.Tensor.cpu, torch.Tensor.cuda, torch.Tensor.to):
            kwargs.pop("non_blocking", None)
        if memory is not None and target == "cuda":
            if func is torch.Tensor.cuda:
                if on_dev:
                    return source
                return memory.allocate(tensor_nbytes(source), source.clone, touch=False)
            if func is torch.Tensor.to and not on_dev:
                kwargs["copy"] = True
            elif func is torch.Tensor.to and not kwargs.get("copy"):
                if "device" in kwargs:
                    kwargs["device"] = host_device(kwargs["device"])
                result = func(*args, **kwargs)  # a no-op, or a dtype change on the device
                if same_storage(result, source):
                    return result
                return memory.adopt(result)
        elif func in (torch.Tensor.cpu, torch.Tensor.to) and target == "cpu" and on_dev:
            if func is torch.Tensor.cpu:
                return source.clone()
            kwargs["copy"] = True
        size = copy_of = None
        device_result = memory is not None and (
            (target == "cuda" and func is not torch.Tensor.cpu)
            or (target is None and on_dev and (func in LIKE or func is torch.Tensor.to))
        )
        if device_result:
            size = meta_nbytes(func, args, kwargs)
            if size == RETURNS_INPUT and source is not None and not on_dev:
                # the op would hand back its host input (``torch.as_tensor(h, device=
                # "cuda")``): on a GPU that is a copy to the device
                size = tensor_nbytes(source)
                copy_of = source
            device_result = size != RETURNS_INPUT  # an empty result is device memory too
        kwargs.pop("pin_memory", None)
        if "device" in kwargs:
            kwargs["device"] = host_device(kwargs["device"])
        if not device_result:
            result = func(*args, **kwargs)
            if target == "cpu" and on_dev and same_storage(result, source):
                return result.clone()  # asked for the host: on a GPU, a copy to the host
            return result
        if copy_of is not None:
            run = lambda: fresh_copy(func(*args, **kwargs), copy_of)  # noqa: E731
        else:
            run = lambda: func(*args, **kwargs)  # noqa: E731
        if size is None:
            return memory.adopt(run())
        return memory.allocate(size, run, touch=func in UNWRITTEN)


_STRATEGY_CODE = False
"""True while a strategy's own code runs (:func:`strategy_code`)."""


@contextlib.contextmanager
def strategy_code() -> Iterator[None]:
    """While a strategy's code runs, what any op computes from device memory is device
    memory, as on a GPU (``torch.cat([d])``, ``d * 1``, ``copy.deepcopy(d)``...): a copy
    kept on the device is not a move to the host. megatron-core's train steps run outside
    (their activations stay plain host tensors: train rows count in no figure)."""
    global _STRATEGY_CODE
    previous, _STRATEGY_CODE = _STRATEGY_CODE, True
    memory = ACTIVE
    if memory is not None:
        memory.recycling.by_strategy = True
    try:
        yield
    finally:
        _STRATEGY_CODE = previous
        if memory is not None:
            memory.recycling.by_strategy = previous


def _resize_tensor(func: object, args: tuple, kwargs: dict) -> object:
    """``Tensor.resize_``/``resize_as_`` of a device tensor: a storage it outgrows grows
    through the emulated device first (torch would grow it behind the accounting)."""
    tensor, memory = local(args[0]), ACTIVE
    if memory is not None and memory.holds(tensor):
        if func is torch.Tensor.resize_as_:
            shape = tuple(args[1].shape)
        elif len(args) == 2 and isinstance(args[1], (tuple, list, torch.Size)):
            shape = tuple(args[1])
        else:
            shape = tuple(args[1:])
        need = (tensor.storage_offset() + math.prod(int(n) for n in shape)) * tensor.element_size()
        storage = tensor.untyped_storage()
        if need > storage.nbytes():
            memory.resize(storage, need)
    return func(*args, **kwargs)


def _reads_device(args: tuple, kwargs: dict | None) -> bool:
    return ACTIVE is not None and any(_is_held(t) for t in tensor_args(args, kwargs))


def _device_op(func: object, args: tuple, kwargs: dict) -> object:
    """An op on device memory in strategy code: its new storages are device memory (its
    inputs' storages, views and in-place results included, are not new)."""
    memory = ACTIVE
    inputs = frozenset(local(t).untyped_storage()._cdata for t in tensor_args(args, kwargs))
    size = meta_nbytes(func, args, kwargs)
    run = lambda: func(*args, **kwargs)  # noqa: E731
    if size == RETURNS_INPUT:
        return run()
    if size is None:
        return memory.adopt(run(), exclude=inputs)
    return memory.allocate(size, run, touch=False, exclude=inputs)


def _is_held(tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s storage is emulated device memory (allocated or freed)."""
    return ACTIVE is not None and ACTIVE.holds(tensor)


def _held(args: tuple) -> bool:
    """Whether the op's first argument is emulated device memory."""
    return bool(args) and isinstance(args[0], torch.Tensor) and _is_held(args[0])


def _require_storage(tensor: torch.Tensor) -> None:
    """A transfer that reads freed storage fails, as ``cudaMemcpy`` does on a GPU.

    (Reading it on the host would be an out-of-bounds read, not an error.)
    """
    tensor = local(tensor)
    if tensor.numel() == 0:
        return
    last = sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride(), strict=True))
    if (
        tensor.untyped_storage().nbytes()
        < (tensor.storage_offset() + last + 1) * tensor.element_size()
    ):
        raise RuntimeError(
            "CUDA error: invalid argument (CPU emulation: a device-host copy read "
            "a tensor whose storage was freed)"
        )


@contextlib.contextmanager
def is_cuda_as_on_gpu() -> Iterator[None]:
    """Inside the block ``Tensor.is_cuda`` answers what it would on a GPU: True for a
    tensor whose storage is emulated device memory (allocated or freed), False otherwise.

    For code that decides what to move by ``is_cuda`` (megatron-core's optimizer
    ``offload_to_cpu``/``restore_from_cpu``).
    """
    memory = ACTIVE
    with mock.patch.object(
        torch.Tensor, "is_cuda", property(lambda t: memory is not None and memory.holds(t))
    ):
        yield


def _to_keywords(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``Tensor.to`` in its keyword form: ``to(other)`` becomes other's device (the emulated
    device when other is device memory) and dtype; positional device, dtype, non_blocking
    and copy become keywords."""
    source, rest = args[0], list(args[1:])
    out = dict(kwargs)
    if rest and isinstance(rest[0], torch.Tensor):
        other = rest.pop(0)
        out.setdefault("device", _EMULATED_CUDA if _is_held(other) else real_device(other))
        out.setdefault("dtype", other.dtype)
    else:
        if rest and (rest[0] is None or is_device(rest[0])):
            out["device"] = rest.pop(0)
        if rest and isinstance(rest[0], torch.dtype):
            out["dtype"] = rest.pop(0)
    for name, value in zip(("non_blocking", "copy"), rest, strict=False):
        out[name] = value
    if out.get("device", 0) is None:
        del out["device"]
    return (source,), out


_ORIGINAL_DEVICE = torch._C.TensorBase.device
_EMULATED_CUDA = torch.device("cuda", 0)


def real_device(tensor: torch.Tensor) -> torch.device:
    """Where ``tensor``'s bytes are, as torch itself answers (``cpu`` for an emulated device
    tensor). Call it with ``__torch_function__`` off: under the emulation's mode the getter
    goes through the patched ``Tensor.device``."""
    return _ORIGINAL_DEVICE.__get__(tensor)


def _device_of(self: torch.Tensor) -> torch.device:
    """``Tensor.device``: ``cuda:0`` for a tensor whose storage is emulated device memory, so
    ``torch.zeros(..., device=t.device)`` allocates on the (emulated) device, as on a GPU."""
    device = real_device(self)
    if device.type == "cpu" and _is_held(self):
        return _EMULATED_CUDA
    return device


def _resize(self: torch.UntypedStorage, size: int) -> object:
    """``UntypedStorage.resize_``: a device storage frees/allocates through the device."""
    memory = ACTIVE
    if memory is not None and memory.holds_storage(self):
        return memory.resize(self, size)
    return _ORIGINAL_RESIZE(self, size)


_ORIGINAL_TYPE = torch.Tensor.type


def _cuda_type_name(self: torch.Tensor, *args: object, **kwargs: object) -> object:
    """``Tensor.type``: a device tensor's name is ``torch.cuda.*``; a conversion puts its
    result where a GPU would (a dtype keeps the device, a type name says it)."""
    if args or kwargs:
        return _convert_type(self, *args, **kwargs)
    name = _ORIGINAL_TYPE(self)
    if not isinstance(name, str) or name.startswith("torch.cuda."):
        return name
    return "torch.cuda." + name.removeprefix("torch.") if _is_held(self) else name


def _type_as(self: torch.Tensor, other: torch.Tensor) -> object:
    """``Tensor.type_as``: ``self.type(other.type())``, as torch defines it, through the
    emulation's ``type`` (other's place and dtype)."""
    return _convert_type(self, _cuda_type_name(other))


_ORIGINAL_STORAGE = {
    name: getattr(torch.UntypedStorage, name) for name in ("clone", "cpu", "cuda", "new")
}


def _storage_held(storage: torch.UntypedStorage) -> bool:
    return ACTIVE is not None and ACTIVE.holds_storage(storage)


def _device_copy(storage: torch.UntypedStorage) -> torch.UntypedStorage:
    """A copy of ``storage`` in emulated device memory."""
    clone = _ORIGINAL_STORAGE["clone"]
    return ACTIVE.allocate(storage.nbytes(), lambda: clone(storage), touch=False)


def _storage_clone(self: torch.UntypedStorage) -> torch.UntypedStorage:
    """A device storage's clone is device memory."""
    return _device_copy(self) if _storage_held(self) else _ORIGINAL_STORAGE["clone"](self)


def _storage_cpu(self: torch.UntypedStorage) -> torch.UntypedStorage:
    """``.cpu()`` of a device storage is a host copy (of a host storage, itself)."""
    return _ORIGINAL_STORAGE["clone" if _storage_held(self) else "cpu"](self)


def _storage_cuda(self: torch.UntypedStorage, *args: object, **kwargs: object) -> object:
    """``.cuda()`` of a host storage is a device copy (of a device storage, itself)."""
    if ACTIVE is None:
        return _ORIGINAL_STORAGE["cuda"](self, *args, **kwargs)
    return self if _storage_held(self) else _device_copy(self)


def _storage_new(self: torch.UntypedStorage) -> torch.UntypedStorage:
    """``new()`` of a device storage is an empty device storage (grown, device memory)."""
    new = _ORIGINAL_STORAGE["new"]
    if not _storage_held(self):
        return new(self)
    return ACTIVE.allocate(0, lambda: new(self), touch=False)


_STORAGE_MOVES = {
    "clone": _storage_clone,
    "cpu": _storage_cpu,
    "cuda": _storage_cuda,
    "new": _storage_new,
}


def _convert_type(
    self: torch.Tensor, dtype: object = None, non_blocking: bool = False, **kwargs: object
) -> object:
    """``t.type(torch.float64)``, ``t.type("torch.cuda.FloatTensor")`` or
    ``t.type(torch.cuda.FloatTensor)`` through ``Tensor.to``, which the emulation places."""
    if dtype is None:
        dtype = kwargs.pop("dtype", None)
    if dtype is None:
        return _cuda_type_name(self)
    if isinstance(dtype, torch.dtype):
        place = "cuda" if _is_held(self) else "cpu"
        return self.to(place, dtype=dtype, non_blocking=non_blocking)
    name = dtype if isinstance(dtype, str) else f"{dtype.__module__}.{dtype.__name__}"
    cuda = name.startswith("torch.cuda.")
    host_type = getattr(torch, name.rpartition(".")[2], None)
    if not name.startswith("torch.") or not isinstance(
        getattr(host_type, "dtype", None), torch.dtype
    ):
        return _ORIGINAL_TYPE(self, dtype, non_blocking, **kwargs)  # torch's own error
    return self.to("cuda" if cuda else "cpu", dtype=host_type.dtype, non_blocking=non_blocking)


_ORIGINAL_THREAD_START = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]


def _thread_under_the_mode(self: threading.Thread) -> None:
    """A Python thread started while the emulated device is active runs under the
    CUDA-to-host mode too (a torch-function mode is per thread): a thread pool's
    ``.to("cpu")`` is a host copy and its ``torch.cat`` of a device tensor device memory."""
    if ACTIVE is None:
        return _ORIGINAL_THREAD_START(self)
    with _CudaToHost():
        return _ORIGINAL_THREAD_START(self)


_ORIGINAL_BACKWARD_APPLY = torch.autograd.function.BackwardCFunction.apply


def _backward_apply(self: object, *args: object) -> object:
    """The backward of a custom autograd Function (megatron's all-to-all, for one) runs with
    no torch-function mode active: run it under the CUDA-to-host mode, as its forward ran,
    so its ``device=torch.cuda.current_device()`` allocations are device memory here too."""
    from torch.overrides import _get_current_function_mode_stack

    modes = _get_current_function_mode_stack()
    if ACTIVE is None or any(isinstance(m, _CudaToHost) for m in modes):
        return _ORIGINAL_BACKWARD_APPLY(self, *args)
    with _CudaToHost():
        return _ORIGINAL_BACKWARD_APPLY(self, *args)


@contextlib.contextmanager
def emulated_device(malloc: str = "real") -> Iterator[DeviceMemory]:
    """The emulated device alone (no megatron shims): its memory, the CUDA-to-host mode,
    ``resize_`` of device storages through it, and ``Tensor.device`` reporting ``cuda:0``.
    ``malloc``: ``real`` leaves glibc's malloc as the process has it; ``fixed`` fixes its
    mmap threshold (for the rest of the process: glibc cannot undo it)."""
    global ACTIVE
    if ACTIVE is not None:
        raise RuntimeError("an emulated device is already active in this process")
    with contextlib.ExitStack() as stack:
        glibc_malloc.enter(malloc)
        stack.callback(glibc_malloc.leave)
        memory = DeviceMemory()
        stack.callback(memory.close)
        ACTIVE = memory
        stack.callback(globals().__setitem__, "ACTIVE", None)
        stack.enter_context(mock.patch.object(torch.UntypedStorage, "resize_", _resize))
        stack.enter_context(mock.patch.object(torch.Tensor, "device", property(_device_of)))
        stack.enter_context(mock.patch.object(torch.Tensor, "type", _cuda_type_name))
        stack.enter_context(mock.patch.object(torch.Tensor, "type_as", _type_as))
        for name, method in _STORAGE_MOVES.items():
            stack.enter_context(mock.patch.object(torch.UntypedStorage, name, method))
        stack.enter_context(
            mock.patch.object(torch.autograd.function.BackwardCFunction, "apply", _backward_apply)
        )
        stack.enter_context(
            mock.patch.object(threading.Thread, "_bootstrap_inner", _thread_under_the_mode)
        )
        stack.enter_context(hooks_under(_CudaToHost, lambda: ACTIVE is not None))
        stack.enter_context(_CudaToHost())
        yield memory
