"""PyTorch FSDP2 (``fully_shard``) as an engine: its strategies, readings and layout."""
