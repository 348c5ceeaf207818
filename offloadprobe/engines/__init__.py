"""The training engines: one wing each (``megatron``, ``fsdp2``), described to the rest
of the tool by ``core.engines``. The harness never imports a wing; wings never import
each other (``tools/check_layers.py``)."""
