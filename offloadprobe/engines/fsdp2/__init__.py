"""FSDP2 (``torch.distributed.fsdp.fully_shard``) as an engine: a plain-PyTorch GPT-like
model sharded per block, AdamW over its fp32 shards, the inventory of every tensor it
owns, and the three ways its ranks run (gloo under CPU emulation, PyTorch's fake process
group on one device, real NCCL ranks). Strategies live beside it, not here."""
