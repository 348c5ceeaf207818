"""The ``checkpoint`` step of a sequence: save the model and the optimizer with
``torch.distributed.checkpoint`` to a temporary folder, then remove it.

What is saved: every module's ``state_dict()`` (megatron: each chunk's bf16 parameters,
read through the DDP buffers) and every tensor of the inventory's optimizer state
(megatron: Adam's moments, fp32 master weights, scales; each storage once, named by
owner), with the param groups' values. On
CUDA ``torch.distributed.checkpoint`` stages device tensors through host memory: that is
the transient the phase measures (its host peak over its start), and what stays resident
after it is its host after over its start (verl #5665: 17 to 20 GB per rank of host growth
around checkpoints). The files are removed before the phase ends, so they hold no page
cache or tmpfs pages afterwards; a folder that cannot be removed fails the step.

megatron-core's own ``dist_checkpointing.save`` (``sharded_state_dict``) is not the path
here: in 0.16 its default writer starts a spawned manager process and forks a writer per
bucket (about 11 s for a one-layer model in CPU emulation), and the DistributedOptimizer's
default sharding refuses flattened ranges (``dp_reshardable`` is needed).

The temporary folder goes where ``TMPDIR`` says, read at each step (default: the
system's temporary directory; on a tmpfs the files are host memory while they exist).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from offloadprobe.core.errors import OffloadProbeError
from offloadprobe.core.roles import Role
from offloadprobe.engine.engine_state import inventory_of

DIR_ENV = "TMPDIR"
"""Read at every checkpoint step (``tempfile`` reads it once per process)."""


def state_to_save(model: Any) -> dict[str, Any]:
    """What a training job checkpoints: the model's state and the optimizer's, by name,
    under this rank's own key (each rank saves all it holds: a replica is not deduplicated
    across ranks, and a shard is never taken for another rank's)."""
    import torch.distributed as dist

    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    chunks = {f"chunk{i}": chunk.state_dict() for i, chunk in enumerate(model.modules)}
    seen: set[int] = set()
    tensors: dict[str, Any] = {}
    state = [h for h in inventory_of(model) if h.role is Role.OPTIMIZER]
    for index, held in enumerate(state):
        key = held.tensor.untyped_storage()._cdata
        if key in seen:
            continue
        seen.add(key)
        tensors[f"{index}.{held.owner}"] = held.tensor
    groups = {
        f"{p}.{g}": {k: v for k, v in group.items() if k != "params"}
        for p, part in enumerate(model.optimizer_groups())
        for g, group in enumerate(part)
    }
    optimizer = {"state": tensors, "param_groups": groups}
    return {f"rank{rank}": {"model": chunks, "optimizer": optimizer}}


def _written(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def save_and_remove(model: Any) -> int:
    """Save the model and the optimizer to a fresh temporary folder with
    ``torch.distributed.checkpoint``, remove it, and return the bytes the files held."""
    import torch.distributed.checkpoint as dcp

    folder = Path(tempfile.mkdtemp(prefix="offloadprobe-checkpoint-", dir=os.environ.get(DIR_ENV)))
    try:
        dcp.save(state_to_save(model), checkpoint_id=str(folder))
        written = _written(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if folder.exists():
        raise OffloadProbeError(f"the checkpoint folder {folder} could not be removed")
    return written
