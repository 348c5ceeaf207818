"""One real train step through megatron's schedules: forward, backward, DDP grad sync
(``finalize_model_grads``), DistributedOptimizer step.

``get_forward_backward_func()`` picks the schedule for the layout: no pipelining at
``pp`` 1, 1F1B across pipeline ranks, the interleaved schedule with ``vpp``. Every
micro-batch is the model's fixed batch (the interleaved schedule needs at least ``pp``
micro-batches; it gets exactly ``pp``). The loss exists on the last pipeline stage; it is
broadcast over the pipeline group, so every rank returns the same loss.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import torch

from offloadprobe.engine.model.builder import ProbeModel
from offloadprobe.engine.runtime import glibc_malloc

REF_WEIGHT = 0.01
"""With ``--ref-model``: the weight of the squared difference between the policy's and the
reference model's per-token losses in the loss (a KL-like term, so reference weights that
did not come back bit for bit change the next step)."""


def _forward_step(batch: dict[str, torch.Tensor], ref_chunks: list[Any]) -> Any:
    def loss_func(
        ref: torch.Tensor | None, output: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        loss = output.float().mean()
        if ref is not None:
            loss = loss + REF_WEIGHT * (output.float() - ref.float()).pow(2).mean()
        return loss, {"loss": loss.detach().clone()}

    def forward_step(data_iterator: Any, chunk: Any) -> tuple[torch.Tensor, Any]:
        data = next(data_iterator)
        inputs = (data["input_ids"], data["position_ids"], data["attention_mask"])
        output = chunk(*inputs, labels=data["labels"])
        ref = None
        if ref_chunks:  # the reference policy's log-probs, as an RL step computes them
            with torch.no_grad():
                ref = ref_chunks[0](*inputs, labels=data["labels"])
        return output, functools.partial(loss_func, ref)

    return forward_step


def _pipeline_loss(loss: float | None, device: str) -> float | None:
    """The last stage's loss on every rank of the pipeline group (a no-op at ``pp`` 1)."""
    from megatron.core import parallel_state

    if parallel_state.get_pipeline_model_parallel_world_size() == 1:
        return loss
    value = torch.tensor([loss if loss is not None else 0.0], dtype=torch.float64, device=device)
    torch.distributed.broadcast(
        value,
        src=parallel_state.get_pipeline_model_parallel_last_rank(),
        group=parallel_state.get_pipeline_model_parallel_group(),
    )
    return float(value.item())


def train_step(model: ProbeModel) -> float:
    """Run one step on the fixed batch and return the loss (the same on every rank)."""
    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel import get_forward_backward_func

    for chunk in model.chunks:
        chunk.zero_grad_buffer()
    model.optimizer.zero_grad()
    batch = model.batch
    virtual = len(model.chunks) > 1
    microbatches = parallel_state.get_pipeline_model_parallel_world_size() if virtual else 1
    iterators = [itertools.repeat(batch) for _ in model.chunks]
    stored = get_forward_backward_func()(
        forward_step_func=_forward_step(batch, model.ref_chunks),
        data_iterator=iterators if virtual else iterators[0],
        model=model.chunks if virtual else model.chunks[0],
        num_microbatches=microbatches,
        seq_length=model.config.seq_length,
        micro_batch_size=model.config.micro_batch_size,
        forward_only=False,
    )
    losses = [float(item["loss"]) for item in stored] if stored else []
    loss = losses[-1] if losses else None
    model.optimizer.step()
    glibc_malloc.device_work_done()  # CPU emulation: the step's host memory is no GPU's
    return _pipeline_loss(loss, batch["input_ids"].device.type)
