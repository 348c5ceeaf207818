"""Where the probe runs: CUDA, or megatron's objects over gloo in host memory."""

from offloadprobe.engine.runtime.session import Runtime, open_runtime

__all__ = ["Runtime", "open_runtime"]
