"""One real train step: forward, backward, DDP grad sync, DistributedOptimizer step."""

from __future__ import annotations

from offloadprobe.engine.model.builder import ProbeModel


def train_step(model: ProbeModel) -> float:
    """Run one step on the fixed batch and return the loss."""
    for chunk in model.chunks:
        chunk.zero_grad_buffer()
    model.optimizer.zero_grad()
    batch = model.batch
    losses = model.chunks[0](
        batch["input_ids"],
        batch["position_ids"],
        batch["attention_mask"],
        labels=batch["labels"],
    )
    loss = losses.float().mean()
    loss.backward()
    for chunk in model.chunks:
        chunk.finish_grad_sync()
    model.optimizer.step()
    return float(loss.detach())
