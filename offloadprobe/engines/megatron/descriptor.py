"""megatron-core's engine descriptor (torch-free: read by ``--help`` and the parent)."""

from __future__ import annotations

from offloadprobe.core.engines import EngineInfo
from offloadprobe.core.roles import Role
from offloadprobe.engines.megatron.checks import check_megatron

ENGINE = EngineInfo(
    name="megatron",
    summary="megatron-core GPTModel, DDP buffers, DistributedOptimizer",
    factory="offloadprobe.engine.model.builder:build_probe_model",
    preload=(
        "megatron.core.models.gpt",
        "megatron.core.models.gpt.gpt_layer_specs",
        "megatron.core.distributed",
        "megatron.core.optimizer",
        "megatron.core.pipeline_parallel",
    ),
    parallel_options=frozenset({"tp", "pp", "ep", "cp", "vpp"}),
    optimizer_options=frozenset({"precision_aware", "exp_avg_dtype", "exp_avg_sq_dtype"}),
    owners={
        "param_data": Role.PARAMETERS,
        "grad_data": Role.GRADIENTS,
        "master_param": Role.OPTIMIZER,
        "exp_avg": Role.OPTIMIZER,
        "exp_avg_sq": Role.OPTIMIZER,
        "frozen": Role.FROZEN,
        "ref_model": Role.REFERENCE,
    },
    strategy_packages=(
        "offloadprobe.engine.strategies",
        "offloadprobe.engine.optimizer.strategies",
    ),
    check=check_megatron,
    session="offloadprobe.engines.megatron.session:megatron_session",
    layout="offloadprobe.layout.buffers",
    default=True,
)
