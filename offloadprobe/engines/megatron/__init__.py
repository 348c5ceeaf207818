"""megatron-core as an engine: GPTModel, DDP buffers, the DistributedOptimizer."""
