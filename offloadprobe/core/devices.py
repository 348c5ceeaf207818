"""Which device a run will use, guessed without importing torch (the parent's view).

The worker resolves the device for real (``engine.runtime.session.resolve_device``) and
its report says which it used; the parent only needs a guess for what it decides before
the worker starts (whether a run fits in host memory, which allocator settings apply).
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from offloadprobe.core.errors import DeviceUnavailable, UsageError

NO_CUDA = (
    "--device cuda was requested but this host has no usable CUDA device: "
    "run on a GPU node or use --device cpu for the CPU emulation"
)

DEVICES = ("auto", "cuda", "cpu")


def torch_is_cuda_build() -> bool:
    """Whether the installed torch is a CUDA build (a ``+cpu`` local version is not)."""
    try:
        version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        return False
    return "+cpu" not in version


def has_gpu() -> bool:
    """An NVIDIA device node and a CUDA build of torch: a GPU is there to use."""
    return Path("/dev/nvidiactl").exists() and torch_is_cuda_build()


def guess_device(requested: str) -> str:
    """``cuda`` or ``cpu``: what ``requested`` (auto, cuda, cpu) will most likely give."""
    if requested not in DEVICES:
        raise UsageError(f"--device must be auto, cuda or cpu, got {requested!r}")
    if requested == "auto":
        return "cuda" if has_gpu() else "cpu"
    if requested == "cuda" and not has_gpu():
        raise DeviceUnavailable(NO_CUDA)
    return requested


def forks_cleanly(requested: str) -> bool:
    """Whether a process that imported torch and megatron-core may fork the processes of a
    run on ``requested``: CPU emulation on a host without a GPU. On a GPU host importing
    megatron-core initialises CUDA, which a forked child cannot use again (seen on the
    H200: every forked row crashed there); bad input is a fresh worker's to report."""
    if has_gpu():
        return False
    try:
        return guess_device(requested) == "cpu"
    except UsageError:  # DeviceUnavailable is one
        return False
