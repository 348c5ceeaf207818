"""Build the probe model from real megatron-core parts.

``GPTModel`` (local layer spec, bf16 through ``Float16Module``) wrapped in megatron's
``DistributedDataParallel`` with ``use_distributed_optimizer=True``, so each DDP
chunk owns contiguous per-dtype ``param_data``/``grad_data`` buffers exactly as in
verl and NeMo-RL, and a megatron ``DistributedOptimizer`` over it.

At the runtime's layout: tensor-parallel layers, this pipeline rank's stage (one chunk
per virtual stage with ``vpp``), and MoE layers with ``num_experts`` (their experts sit in
DDP's ``expert_parallel_buffers``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from offloadprobe.core.config import ModelConfig, OptimizerChoice
from offloadprobe.core.roles import Holding
from offloadprobe.core.world import check_layout
from offloadprobe.engine.model import workspace
from offloadprobe.engine.optimizer.build import build_optimizer
from offloadprobe.engine.runtime import Runtime, glibc_malloc


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
    ref_chunks: list[Any] = field(default_factory=list)
    """``--ref-model``: the frozen reference model (``Float16Module(GPTModel)``, not
    DDP-wrapped), initialised with the policy's weights; its forward runs in every train
    step (the KL term's reference log-probs)."""
    frozen: list[tuple[str, Any]] = field(default_factory=list)
    """``--frozen-fraction``: the policy's frozen parameters (outside the DDP buffers)."""

    @property
    def offload_chunks(self) -> list[Any]:
        """What strategies receive, as frameworks pass it: the DDP chunks, then the
        reference model's chunks."""
        return [*self.chunks, *self.ref_chunks]

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

    # -- the training state's interface (``engine/engine_state.py``)

    def inventory(self, own: Any = None) -> list[Holding]:
        """Every tensor the model holds, once (``engine/model/inventory.py``)."""
        from offloadprobe.engine.model import inventory

        return inventory.inventory(self, own)

    def labels(self) -> dict[str, str]:
        from offloadprobe.engine.model import inventory

        return inventory.labels(self)

    def restores(self, holding: Holding) -> bool:
        from offloadprobe.engine.model import inventory

        return inventory.restores(holding)

    def hung(self, own: Any) -> list[Holding]:
        from offloadprobe.engine.model import inventory

        return inventory.hung(self, own)

    def optimizer_groups(self) -> list[list[dict[str, Any]]]:
        from offloadprobe.engine.model import inventory

        return inventory.optimizer_groups(self)

    def view_problems(self, cycle: int) -> list[str]:
        """Every view of each DDP buffer still at its place (``buffer_views.py``)."""
        from offloadprobe.engine.model.buffer_views import view_problems

        return view_problems(self, cycle)

    @property
    def modules(self) -> list[Any]:
        """The modules a checkpoint saves (their ``state_dict``): the DDP chunks."""
        return self.chunks

    def strategy_args(self, part: str) -> list[Any]:
        """What a ``params`` or ``optimizer`` strategy's offload and load receive."""
        return self.offload_chunks if part == "params" else [self.optimizer]

    def train(self, steps: int) -> float | None:
        """``steps`` train steps; the last loss (None for none)."""
        from offloadprobe.engine.model.train import train_step

        loss = None
        for _ in range(steps):
            loss = train_step(self)
        return loss


def _transformer_config(cfg: ModelConfig, runtime: Runtime) -> Any:
    from megatron.core.transformer.transformer_config import TransformerConfig

    world = runtime.world
    moe: dict[str, Any] = {}
    if cfg.num_experts:
        moe = {
            "num_moe_experts": cfg.num_experts,
            "moe_router_topk": cfg.moe_router_topk,
            # all-to-all exchange of tokens between expert-parallel ranks: NCCL and (through
            # all_to_all_single) gloo both have it; no grouped GEMM (no TransformerEngine)
            "moe_token_dispatcher_type": "alltoall",
            "moe_grouped_gemm": False,
        }
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
        **world.megatron_sizes,
        # megatron requires sequence parallelism for MoE layers under tensor parallelism
        sequence_parallel=world.tp > 1 and bool(cfg.num_experts),
        **moe,
    )


def _moe_without_transformer_engine() -> None:
    """megatron-core 0.16's router tests ``te_general_gemm is not None``, a name it only
    binds when TransformerEngine imports: without TE that is a NameError. Bind it to None
    (what the test means: no TE GEMM, use ``torch.mm``)."""
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None


def _gpt_chunks(cfg: ModelConfig, tconfig: Any, runtime: Runtime) -> list[Any]:
    """This rank's GPTModel pieces: one per virtual pipeline stage (one without vpp), each
    with the embedding only on the first stage and the output layer only on the last."""
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    if cfg.num_experts:
        _moe_without_transformer_engine()
    spec = get_gpt_layer_local_spec(num_experts=cfg.num_experts or None, moe_grouped_gemm=False)
    virtual = runtime.world.vpp is not None
    pieces = []
    for stage in range(runtime.world.chunks):
        where: dict[str, Any] = {"ignore_virtual": not virtual}
        if virtual:
            where["vp_stage"] = stage
        extra = {"vp_stage": stage} if virtual else {}
        gpt = GPTModel(
            config=tconfig,
            transformer_layer_spec=spec,
            vocab_size=cfg.vocab_size,
            max_sequence_length=cfg.seq_length,
            pre_process=parallel_state.is_pipeline_first_stage(**where),
            post_process=parallel_state.is_pipeline_last_stage(**where),
            **extra,
        )
        if not runtime.emulated:
            gpt.cuda()
        pieces.append(gpt)
    return pieces


def _freeze(gpts: list[Any], fraction: float) -> list[tuple[str, Any]]:
    """Freeze about ``fraction`` of the parameters (by count), decoder linear weights
    first, as LoRA freezes its base weights; at least one parameter stays trainable."""
    if not fraction:
        return []
    named = [
        (f"{i}.{name}" if len(gpts) > 1 else name, p)
        for i, gpt in enumerate(gpts)
        for name, p in gpt.named_parameters()
    ]
    order = sorted(named, key=lambda item: not ("linear" in item[0] and item[0].endswith("weight")))
    total = sum(p.numel() for _, p in named)
    frozen: list[tuple[str, Any]] = []
    count = 0
    for name, p in order[:-1]:
        if count >= fraction * total:
            break
        p.requires_grad_(False)
        frozen.append((name, p))
        count += p.numel()
    return frozen


def _reference_model(
    cfg: ModelConfig, tconfig: Any, runtime: Runtime, policy: list[Any]
) -> list[Any]:
    """A frozen copy of the policy (its initial weights), not DDP-wrapped, on the device."""
    from megatron.core.transformer.module import Float16Module

    (gpt,) = _gpt_chunks(cfg, tconfig, runtime)
    with torch.no_grad():
        for mine, theirs in zip(gpt.parameters(), policy[0].parameters(), strict=True):
            mine.copy_(theirs)
    ref = Float16Module(tconfig, gpt)
    ref.requires_grad_(False)
    ref.eval()
    if runtime.emulated:
        ref.cuda()  # emulated device memory (on CUDA the GPTModel was built there)
    return [ref]


def _on_device(frozen: list[tuple[str, Any]], runtime: Runtime) -> None:
    """CPU emulation: DDP put the trainable parameters in device buffers; the frozen ones
    it left where megatron made them (host memory) go to the device too, as on a GPU."""
    if runtime.emulated:
        for _, p in frozen:
            p.data = p.data.cuda()


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
    from megatron.core.distributed import (
        DistributedDataParallel,
        DistributedDataParallelConfig,
        finalize_model_grads,
    )
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.module import Float16Module

    check_layout(cfg, runtime.world)  # exit 2 before anything is built
    torch.manual_seed(seed)
    model_parallel_cuda_manual_seed(seed)  # on CUDA, weights come from megatron's RNG tracker
    tconfig = _transformer_config(cfg, runtime)
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True,
        overlap_grad_reduce=False,
        use_distributed_optimizer=True,
    )
    gpts = _gpt_chunks(cfg, tconfig, runtime)
    frozen = _freeze(gpts, cfg.frozen_fraction)
    ref_chunks = _reference_model(cfg, tconfig, runtime, gpts) if cfg.ref_model else []
    chunks = [
        DistributedDataParallel(
            config=tconfig,
            ddp_config=ddp_config,
            module=Float16Module(tconfig, gpt),
            # as megatron's training loop: only the first chunk is split into buckets
            disable_bucketing=index > 0,
        )
        for index, gpt in enumerate(gpts)
    ]
    _on_device(frozen, runtime)
    # what megatron's schedules call around the micro-batches (see train.py)
    tconfig.no_sync_func = [c.no_sync for c in chunks] if len(chunks) > 1 else chunks[0].no_sync
    tconfig.finalize_model_grads_func = finalize_model_grads
    workspace.install(chunks, cfg.workspace_cache_bytes)
    choice = optimizer or OptimizerChoice()
    megatron_optimizer, optimizer_name = build_optimizer(choice, chunks)
    glibc_malloc.device_work_done()  # CPU emulation: the build's host temporaries go
    return ProbeModel(
        config=cfg,
        chunks=chunks,
        optimizer=megatron_optimizer,
        optimizer_name=optimizer_name,
        optimizer_choice=choice,
        batch=_batch(cfg, seed, runtime.device),
        ref_chunks=ref_chunks,
        frozen=frozen,
    )
