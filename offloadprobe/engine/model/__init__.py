"""The probe model: megatron-core GPT, DDP contiguous buffers, DistributedOptimizer."""
