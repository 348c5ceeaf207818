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
import ctypes
import ctypes.util
from collections.abc import Iterator
from unittest import mock

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.overrides import TorchFunctionMode

NOTE = "CPU emulation: device buffers in host memory, no pinned memory, no GPU readings"


def trim_host_heap() -> None:
    """Return free glibc heap pages to the kernel (``malloc_trim(0)``), where glibc exists."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _host_device(device: object) -> object:
    if device is None:
        return None
    if isinstance(device, int):
        return torch.device("cpu")
    resolved = torch.device(device)  # type: ignore[arg-type]
    return torch.device("cpu") if resolved.type == "cuda" else resolved


_TRANSFERS = (torch.Tensor.cpu, torch.Tensor.cuda, torch.Tensor.to)


class _CudaToHost(TorchFunctionMode):
    """Send every tensor that asks for CUDA to host memory; pinning becomes a copy.

    Outside offload/load phases a device move is a no-op, as megatron expects of a
    tensor already on its device. Inside them (``transfers_copy``) every ``.cpu()``,
    ``.cuda()`` and ``.to(device)`` makes a new host tensor, as a real device<->host
    transfer does, so a strategy that "moves" state really allocates a copy and the
    original storage can be told apart from it.
    """

    copy_transfers = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        target = _target(func, args, kwargs)
        if "device" in kwargs:
            kwargs["device"] = _host_device(kwargs["device"])
        kwargs.pop("pin_memory", None)  # no page-locked memory here: an ordinary host tensor
        if func is torch.Tensor.to and len(args) > 1 and _is_device(args[1]):
            args = (args[0], _host_device(args[1]), *args[2:])
        if func is torch.Tensor.pin_memory:
            result = args[0].clone()
        elif func in _TRANSFERS and _CudaToHost.copy_transfers and target is not None:
            kwargs.pop("non_blocking", None)
            if func is torch.Tensor.to:
                kwargs["copy"] = True
                result = func(*args, **kwargs)
            else:
                result = args[0].clone()
        elif func is torch.Tensor.cuda:
            return args[0]
        else:
            result = func(*args, **kwargs)
        if _CudaToHost.copy_transfers and target == "cpu" and isinstance(result, torch.Tensor):
            _mark_host(result)
        return result


_HOST_MADE: dict[int, StorageWeakRef] = {}


def _mark_host(tensor: torch.Tensor) -> None:
    storage = tensor.untyped_storage()
    _HOST_MADE[storage._cdata] = StorageWeakRef(storage)


def is_host_copy(tensor: torch.Tensor) -> bool:
    """True for a tensor a strategy made in host memory during an emulated transfer."""
    ref = _HOST_MADE.get(tensor.untyped_storage()._cdata)
    return ref is not None and not ref.expired()


def _target(func: object, args: tuple, kwargs: dict) -> str | None:
    """Where the caller asked the result to live: ``cuda``, ``cpu`` or None (unsaid)."""
    if func in (torch.Tensor.cpu, torch.Tensor.pin_memory) or kwargs.get("pin_memory"):
        return "cpu"
    if func is torch.Tensor.cuda:
        return "cuda"
    device = kwargs.get("device")
    if device is None and func is torch.Tensor.to and len(args) > 1 and _is_device(args[1]):
        device = args[1]
    if device is None:
        return None
    if isinstance(device, int):
        return "cuda"
    return "cuda" if torch.device(device).type == "cuda" else "cpu"


def _is_device(value: object) -> bool:
    return isinstance(value, (str, int, torch.device)) and not isinstance(value, bool)


@contextlib.contextmanager
def transfers_copy() -> Iterator[None]:
    """Inside the block, device<->host moves of emulated device tensors make copies."""
    previous = _CudaToHost.copy_transfers
    _CudaToHost.copy_transfers = True
    try:
        yield
    finally:
        _CudaToHost.copy_transfers = previous


class _NullStream:
    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def wait_stream(self, *args: object) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def record_event(self, *args: object) -> None:
        return None


_ORIGINAL_TYPE = torch.Tensor.type


def _cuda_type_name(self: torch.Tensor, *args: object, **kwargs: object) -> object:
    name = _ORIGINAL_TYPE(self, *args, **kwargs)
    if args or kwargs or not isinstance(name, str) or name.startswith("torch.cuda."):
        return name
    return "torch.cuda." + name.removeprefix("torch.")


@contextlib.contextmanager
def cuda_on_host() -> Iterator[None]:
    """Install the shims for the duration of the block, then restore everything."""
    import megatron.core.tensor_parallel.random as mrandom

    host_rng = lambda *a, **k: torch.get_rng_state()  # noqa: E731
    patches = [
        mock.patch("torch.cuda.current_device", lambda: 0),
        mock.patch("torch.cuda.synchronize", lambda *a, **k: None),
        mock.patch("torch.cuda.empty_cache", lambda: None),
        mock.patch("torch.cuda.Stream", _NullStream),
        mock.patch("torch.cuda.stream", lambda *a, **k: contextlib.nullcontext()),
        mock.patch("torch.cuda.default_stream", lambda *a, **k: _NullStream()),
        mock.patch("torch.cuda.current_stream", lambda *a, **k: _NullStream()),
        mock.patch("torch.cuda.manual_seed", lambda *a, **k: None),
        mock.patch("torch.cuda.get_rng_state", host_rng),
        mock.patch.object(mrandom, "_get_cuda_rng_state", host_rng),
        mock.patch.object(mrandom, "_set_cuda_rng_state", lambda *a, **k: None),
        mock.patch.object(torch.Tensor, "type", _cuda_type_name),
    ]
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        stack.enter_context(_CudaToHost())
        yield
