"""FSDP2's offload strategies: the field's rows, read from its code, and the fix.

Each module exports ``STRATEGY``, a ``ModelStrategyInfo`` (``offload(model)`` /
``load(model)`` over the root ``nn.Module`` of a ``fully_shard``'ed model, verl's
signature) or an ``OptimizerStrategyInfo`` (``offload(optimizer)``; ``load(optimizer,
device_id)`` where the field's load takes a device id, as verl's ``load_fsdp_optimizer``
does, else ``load(optimizer)``). A module may also export ``BUILD`` (``build.py``): how
the engine must wrap the model for the row (``CPUOffloadPolicy``, FSDP1).

The descriptors have no ``engines`` field yet: until the registry takes one, these two
lists name this engine's modules (the lead wires them).
"""

MODEL_STRATEGIES = (
    "verl_fsdp2",
    "verl_fsdp2_blocking",
    "verl_fsdp1",
    "nemo_dtensor",
    "cpu_offload_pinned",
    "cpu_offload_pageable",
    "exact",
)
OPTIMIZER_STRATEGIES = ("verl_optimizer", "nemo_optimizer", "exact_optimizer")
PAIRS = {
    "verl_fsdp2": "verl_optimizer",
    "verl_fsdp2_blocking": "verl_optimizer",
    "verl_fsdp1": "verl_optimizer",
    "nemo_dtensor": "nemo_optimizer",
    "cpu_offload_pinned": None,
    "cpu_offload_pageable": None,
    "exact": "exact_optimizer",
}
"""The optimizer row each model row runs with in the field (the policy rows keep the
optimizer state on the host already: nothing to move)."""
