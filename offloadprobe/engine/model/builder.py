"""Build the probe model from real megatron-core parts.

``GPTModel`` (local layer spec, bf16 through ``Float16Module``) wrapped in megatron's
``DistributedDataParallel`` with ``use_distributed_optimizer=True``, so each DDP
chunk owns contiguous per-dtype ``param_data``/``grad_data`` buffers exactly as in
verl and NeMo-RL, and a megatron ``DistributedOptimizer`` over it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from offloadprobe.core.config import ModelConfig, OptimizerChoice
from offloadprobe.engine.optimizer.build import build_optimizer
from offloadprobe.engine.runtime import Runtime


@dataclass(kw_only=True, slots=True)
class ProbeModel:
    """Everything one run offloads and trains."""

    config: ModelConfig
    chunks: list[Any]
    """megatron DDP chunks: the ``models`` list verl's offload functions take."""
    optimizer: Any
    """megatron-core optimizer (a ChainedOptimizer over DistributedOptimizer)."""
    optimizer_name: str
    """Which inner optimizer computes the step, in words."""
    optimizer_choice: OptimizerChoice = field(default_factory=OptimizerChoice)
    """What the optimizer was built from (precision-aware or not, state dtypes)."""
    batch: dict[str, torch.Tensor] = field(default_factory=dict)
    """Fixed tokens, positions, mask and labels for every train step."""

    def buffers(self) -> list[Any]:
        """Every DDP ``_ParamAndGradBuffer``, dense then expert-parallel, in chunk order."""
        found = []
        for chunk in self.chunks:
            found.extend(chunk.buffers)
            found.extend(getattr(chunk, "expert_parallel_buffers", []) or [])
        return found

    @property
    def payload_bytes(self) -> int:
        """Bytes of ``param_data`` a model-parameter offload must move."""
        return sum(b.param_data.numel() * b.param_data.element_size() for b in self.buffers())

    @property
    def grad_bytes(self) -> int:
        """Bytes of ``grad_data`` an offload frees."""
        return sum(b.grad_data.numel() * b.grad_data.element_size() for b in self.buffers())

    @property
    def param_count(self) -> int:
        """Parameters in the model (without DDP padding)."""
        return sum(p.numel() for c in self.chunks for p in c.parameters())


def _transformer_config(cfg: ModelConfig, runtime: Runtime) -> Any:
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig(
        num_layers=cfg.num_layers,
        hidden_size=cfg.hidden_size,
        num_attention_heads=cfg.num_attention_heads,
        use_cpu_initialization=runtime.emulated,
        bf16=True,
        params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )


def _batch(cfg: ModelConfig, seed: int, device: str) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    shape = (cfg.micro_batch_size, cfg.seq_length)
    tokens = torch.randint(0, cfg.vocab_size, shape, generator=gen)
    labels = torch.randint(0, cfg.vocab_size, shape, generator=gen)
    positions = torch.arange(cfg.seq_length).unsqueeze(0).expand(shape).contiguous()
    causal = torch.ones(1, 1, cfg.seq_length, cfg.seq_length, dtype=torch.bool).triu(1)
    batch = {"input_ids": tokens, "position_ids": positions, "attention_mask": causal}
    batch["labels"] = labels
    return {k: v.to(device) for k, v in batch.items()}


def build_probe_model(
    cfg: ModelConfig,
    runtime: Runtime,
    *,
    seed: int,
    optimizer: OptimizerChoice | None = None,
) -> ProbeModel:
    """Build GPTModel -> Float16Module -> DDP -> DistributedOptimizer on the runtime."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.module import Float16Module

    torch.manual_seed(seed)
    model_parallel_cuda_manual_seed(seed)  # on CUDA, weights come from megatron's RNG tracker
    tconfig = _transformer_config(cfg, runtime)
    gpt = GPTModel(
        config=tconfig,
        transformer_layer_spec=get_gpt_layer_local_spec(),
        vocab_size=cfg.vocab_size,
        max_sequence_length=cfg.seq_length,
    )
    if not runtime.emulated:
        gpt.cuda()
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True,
        overlap_grad_reduce=False,
        use_distributed_optimizer=True,
    )
    chunk = DistributedDataParallel(
        config=tconfig, ddp_config=ddp_config, module=Float16Module(tconfig, gpt)
    )
    choice = optimizer or OptimizerChoice()
    megatron_optimizer, optimizer_name = build_optimizer(choice, [chunk])
    return ProbeModel(
        config=cfg,
        chunks=[chunk],
        optimizer=megatron_optimizer,
        optimizer_name=optimizer_name,
        optimizer_choice=choice,
        batch=_batch(cfg, seed, runtime.device),
    )
