"""offloadprobe: memory profiling and reproduction of offload strategies on megatron-core."""

__version__ = "0.1.0"


def __getattr__(name: str):
    """``offloadprobe.phase``, imported on first use (it imports nothing itself)."""
    if name == "phase":
        from offloadprobe.attach.api import phase

        globals()["phase"] = phase
        return phase
    raise AttributeError(f"module 'offloadprobe' has no attribute {name!r}")
