"""Versions and machine facts recorded with every report.

Torch-free at import: a parent that never imports torch reads torch's version from its
package metadata (and no CUDA version or GPU); a worker, where torch is imported, reads
them from torch itself."""

from __future__ import annotations

import os
import platform
import socket
import sys
from importlib import metadata
from typing import Any

import psutil


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, str | None]:
    """torch, megatron-core, CUDA, TransformerEngine and Python versions."""
    torch = sys.modules.get("torch")
    return {
        "torch": torch.__version__ if torch is not None else _version("torch"),
        "megatron_core": _version("megatron-core") or _megatron_module_version(),
        "cuda": torch.version.cuda if torch is not None else None,
        "transformer_engine": _version("transformer-engine") or _version("transformer_engine"),
        "python": platform.python_version(),
    }


def _megatron_module_version() -> str | None:
    if "megatron.core" not in sys.modules:
        return None
    try:
        import megatron.core

        return getattr(megatron.core, "__version__", None)
    except ImportError:
        return None


def machine() -> dict[str, Any]:
    """Host name, CPU count, host memory and the GPU (if any)."""
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "cpus": os.cpu_count(),
        "host_memory_bytes": psutil.virtual_memory().total,
        "gpu": None,
    }
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info["gpu"] = props.name
        info["gpu_memory_bytes"] = props.total_memory
    return info
