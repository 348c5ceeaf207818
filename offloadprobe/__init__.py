"""offloadprobe: memory profiling and reproduction of offload strategies on megatron-core."""

__version__ = "0.1.0"
