"""PyTorch's allocator settings for a worker: the one place they become environment.

They are torch's own variables (read by torch when it starts), not offloadprobe's: both
names torch has used are set.
"""

from __future__ import annotations


def alloc_conf_env(conf: str | None) -> dict[str, str]:
    if not conf:
        return {}
    return {"PYTORCH_ALLOC_CONF": conf, "PYTORCH_CUDA_ALLOC_CONF": conf}
