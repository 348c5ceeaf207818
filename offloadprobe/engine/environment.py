"""Versions and machine facts recorded with every report."""

from __future__ import annotations

import os
import platform
import socket
from importlib import metadata
from typing import Any

import psutil
import torch


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, str | None]:
    """torch, megatron-core, CUDA, TransformerEngine and Python versions."""
    return {
        "torch": torch.__version__,
        "megatron_core": _version("megatron-core") or _megatron_module_version(),
        "cuda": torch.version.cuda,
        "transformer_engine": _version("transformer-engine") or _version("transformer_engine"),
        "python": platform.python_version(),
    }


def _megatron_module_version() -> str | None:
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
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info["gpu"] = props.name
        info["gpu_memory_bytes"] = props.total_memory
    return info
