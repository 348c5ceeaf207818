"""Inside a torchrun rank (gloo): the emulated collectives against gloo's own, by result and
by peak host memory (VmHWM, reset through clear_refs) over one call on a 32 MiB buffer."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from offloadprobe.engine.runtime import collectives

ELEMENTS = 8 * 2**20  # fp32: 32 MiB


def _hwm() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def _peak_over(call: Callable[[], object]) -> int:
    """Bytes the peak RSS rose by over ``call`` (every rank in step)."""
    dist.barrier()
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
    before = _hwm()
    call()
    dist.barrier()
    return _hwm() - before


def _touched(value: float) -> torch.Tensor:
    tensor = torch.empty(ELEMENTS)
    tensor.fill_(value)  # resident before the measurement
    return tensor


def check() -> dict:
    """Results and peak growth of the emulated and the original collectives on this rank."""
    rank, size = dist.get_rank(), dist.get_world_size()
    found: dict = {"buffer_bytes": ELEMENTS * 4}

    # reduce-scatter into this rank's chunk of the input, as megatron's DDP does
    for label, function in (
        ("gloo", dist.reduce_scatter_tensor),
        ("emulated", collectives.reduce_scatter_tensor(dist.reduce_scatter_tensor)),
    ):
        grads = _touched(0.0)
        grads.copy_(torch.arange(ELEMENTS, dtype=torch.float32) * (rank + 1))
        shard = grads.view(size, -1)[rank]
        found[f"reduce_scatter_{label}_peak"] = _peak_over(lambda: function(shard, grads))  # noqa: B023
        found[f"reduce_scatter_{label}_shard"] = shard.clone()

    # all-gather from this rank's chunk into the whole output, as the parameter gather does
    for label, function in (
        ("gloo", dist.all_gather_into_tensor),
        ("emulated", collectives.all_gather_into_tensor(dist.all_gather_into_tensor)),
    ):
        params = _touched(-1.0)
        own = params.view(size, -1)[rank]
        own.fill_(float(rank + 1))
        found[f"all_gather_{label}_peak"] = _peak_over(lambda: function(params, own))  # noqa: B023
        found[f"all_gather_{label}_whole"] = params.clone()

    # all-gather from a separate input tensor, and coalescing around it
    params, source = _touched(0.0), torch.full((ELEMENTS // size,), float(rank + 7))
    gather = collectives.all_gather_into_tensor(dist.all_gather_into_tensor)
    with collectives.coalescing_manager(dist._coalescing_manager)(None) as handle:
        gather(params, source)
    handle.wait()
    found["separate_input_whole"] = params.clone()
    return found


def summarise(found: dict) -> dict:
    """What the test asserts on, as JSON: equality with gloo's results and the peaks."""
    size = dist.get_world_size()
    expected = torch.arange(size, dtype=torch.float32).repeat_interleave(ELEMENTS // size) + 7
    return {
        "buffer_bytes": found["buffer_bytes"],
        "peaks": {k: v for k, v in found.items() if k.endswith("_peak")},
        "reduce_scatter_equal": torch.equal(
            found["reduce_scatter_gloo_shard"], found["reduce_scatter_emulated_shard"]
        ),
        "all_gather_equal": torch.equal(
            found["all_gather_gloo_whole"], found["all_gather_emulated_whole"]
        ),
        "separate_input_ok": torch.equal(found["separate_input_whole"], expected),
    }
