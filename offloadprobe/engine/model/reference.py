"""The no-offload reference: the same seed trained without any offload, step for step.

After a load, the next train step must give the same loss and the same parameter
bytes as a model that never left the device. This checks more than the buffers'
fingerprints: optimizer state that was lost, reordered or left half-moved shows
up as a different update.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from offloadprobe.engine.model.integrity import fingerprint_buffers
from offloadprobe.engine.model.train import train_step


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What a train phase produced: its last loss and every param buffer's fingerprint."""

    loss: float | None
    fingerprints: list[tuple[int, ...]]


def checkpoint(model: Any, steps: int) -> Checkpoint:
    """Train ``steps`` steps and fingerprint the parameters."""
    loss = None
    for _ in range(steps):
        loss = train_step(model)
    return Checkpoint(loss=loss, fingerprints=fingerprint_buffers(model.chunks))


def reference_trajectory(
    build: Callable[[], Any], steps: int, phases: int, release: Callable[[], None]
) -> list[Checkpoint]:
    """Build a model, run ``phases`` train phases of ``steps`` steps, free it again."""
    model = build()
    points = [checkpoint(model, steps) for _ in range(phases)]
    del model
    gc.collect()
    release()
    return points


def differences(label: str, got: Checkpoint, want: Checkpoint) -> list[str]:
    """Lines describing how a train phase differs from the reference (empty: identical)."""
    problems = []
    if got.loss != want.loss:
        problems.append(
            f"{label}: loss {got.loss!r} differs from the no-offload run's {want.loss!r}"
        )
    if got.fingerprints != want.fingerprints:
        problems.append(f"{label}: parameters differ from the no-offload run's after the step")
    return problems
