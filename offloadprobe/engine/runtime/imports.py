"""The modules every run imports, imported at once when a runtime opens.

A run would otherwise import them lazily, in the middle of its first phases: torch's
compiler stack on the first optimizer step, megatron-core's model, DDP, optimizer and
schedules when the model is built. Imported up front, they are imported while the CLI's
collector pause is in force (``core/collector.py``), and in CPU emulation their objects
are frozen with the rest of the long-lived ones (``cuda_shims.long_lived_objects_frozen``).
"""

from __future__ import annotations

import importlib

RUN_IMPORTS = (
    "torch._dynamo",  # torch.optim's step imports it (about 90 modules, 50,000 objects)
    "megatron.core.models.gpt",
    "megatron.core.models.gpt.gpt_layer_specs",
    "megatron.core.distributed",
    "megatron.core.optimizer",
    "megatron.core.pipeline_parallel",
)


def import_run_modules() -> None:
    """Import every module of ``RUN_IMPORTS`` (a no-op once they are)."""
    for name in RUN_IMPORTS:
        importlib.import_module(name)
