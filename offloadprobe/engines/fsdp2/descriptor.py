"""The FSDP2 engine's descriptor (torch-free: read by ``--help`` and the parent).

PyTorch's ``fully_shard`` per block over a 1-D mesh, ``MixedPrecisionPolicy`` (bf16
parameters, fp32 reduce), fp32 sharded masters and ``torch.optim.AdamW``; no megatron-core.
Its owner words are FSDP2's own (``engines/fsdp2/inventory.py``)."""

from __future__ import annotations

from offloadprobe.core.engines import EngineInfo
from offloadprobe.core.roles import Role
from offloadprobe.engines.fsdp2.checks import check_fsdp2, size_model

ENGINE = EngineInfo(
    name="fsdp2",
    summary="PyTorch fully_shard (FSDP2) per block, DTensor shards, torch.optim.AdamW",
    factory="offloadprobe.engines.fsdp2.training:build_training_state",
    session="offloadprobe.engines.fsdp2.session:fsdp2_session",
    preload=(
        "torch.distributed.fsdp",
        "torch.distributed.tensor",
        "torch.distributed.device_mesh",
        "torch.testing._internal.distributed.fake_pg",
    ),
    parallel_options=frozenset({"shards", "shard_rank"}),
    optimizer_options=frozenset(),
    owners={
        "sharded_param": Role.PARAMETERS,
        "sharded_grad": Role.GRADIENTS,
        "unsharded_grad": Role.GRADIENTS,
        "exp_avg": Role.OPTIMIZER,
        "exp_avg_sq": Role.OPTIMIZER,
        "step": Role.OPTIMIZER,
        "sharded_param_data": Role.FRAMEWORK,
        "unsharded_param": Role.FRAMEWORK,
        "sharded_post_forward_param": Role.FRAMEWORK,
        "all_gather_output": Role.FRAMEWORK,
        "all_gather_state": Role.FRAMEWORK,
        "reduce_scatter_input": Role.FRAMEWORK,
        "partial_reduce_output": Role.FRAMEWORK,
        "all_reduce_input": Role.FRAMEWORK,
        "buffer": Role.FRAMEWORK,
        "batch": Role.BATCH,
    },
    strategy_packages=("offloadprobe.engines.fsdp2.strategies",),
    check=check_fsdp2,
    size_model=size_model,
    layout="offloadprobe.engines.fsdp2.layout",
    default_strategy="exact",
)
