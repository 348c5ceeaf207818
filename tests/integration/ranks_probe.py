"""Run under torchrun: every rank runs ``run_cycles`` at each layout given, in turn, and
writes what it measured to ``OUT/<case>-rank<R>.json``; then, if given, the command line
``offloadprobe CLI_ARGS`` as a user's torchrun would run it, and exits with its code.

    python -m torch.distributed.run --nproc-per-node 2 -m tests.integration.ranks_probe \
        OUT CASES_JSON [CLI_ARGS_JSON]

First, gloo's collectives and their emulation side by side (``collectives-rank<R>.json``,
see gloo_collectives.py). ``CASES_JSON`` maps a case name to
``{"parallel": {...}, "model": {...}}``. Next to the RunRecord each file holds the rank's
world and, from a second build of the model at the same layout, the rank's own buffers
(bytes, expert-parallel buffer count, parameters), for the test to check the record
against. (No train step there: the record's first train phase is that step already, a
fresh model of the same seed on the same batch, and the reference check runs it again.)
"""

# ruff: noqa: E402  (the collector is paused before torch is imported)
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from offloadprobe.core import collector

collector.pause_for_imports()  # as the CLI's entry point does; the first runtime resumes it

import torch

from offloadprobe.core.config import ModelConfig, ParallelConfig, RunConfig
from offloadprobe.engine.model.builder import build_probe_model
from offloadprobe.engine.runner import run_cycles
from offloadprobe.engine.runtime import open_runtime
from tests.integration import gloo_collectives


def _own_buffers(cfg: RunConfig, runtime) -> dict:
    model = build_probe_model(cfg.model, runtime, seed=cfg.seed, optimizer=cfg.optimizer)
    expert = [b for c in model.chunks for b in (c.expert_parallel_buffers or [])]
    found = {
        "param_data_bytes": sum(
            b.param_data.numel() * b.param_data.element_size() for b in model.buffers()
        ),
        "expert_buffers": len(expert),
        "expert_param_data_bytes": sum(
            b.param_data.numel() * b.param_data.element_size() for b in expert
        ),
        "chunks": len(model.chunks),
        "param_count": model.param_count,
    }
    del model
    runtime.release()
    return found


def main(out: Path, cases: dict, cli: list[str] | None = None) -> int:
    # one process group for every case (open_runtime uses one it finds and leaves it)
    torch.distributed.init_process_group(backend="gloo", init_method="env://")
    rank = torch.distributed.get_rank()
    found = gloo_collectives.summarise(gloo_collectives.check())
    (out / f"collectives-rank{rank}.json").write_text(json.dumps(found))
    for name, case in cases.items():
        parallel = ParallelConfig(**case["parallel"])
        cfg = RunConfig(
            model=ModelConfig(**case["model"]),
            strategy="lazy",
            cycles=1,
            device="cpu",
            parallel=parallel,
        )
        with open_runtime("cpu", cfg.seed, parallel) as runtime:
            record = run_cycles(cfg, runtime)
            doc = {
                "world": dataclasses.asdict(runtime.world),
                "note": runtime.note,
                "record": dataclasses.asdict(record),
                "own": _own_buffers(cfg, runtime),
            }
        path = out / f"{name}-rank{runtime.world.rank}.json"
        path.write_text(json.dumps(doc))
    # every rank is done with this process group before the command line's worker joins
    # torchrun's ranks afresh, as a user's torchrun would (in a store namespace of its own)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    code = 0
    if cli is not None:
        from offloadprobe.cli import main as offloadprobe
        from offloadprobe.isolation import supervisor
        from tests.fakes import InProcessChild

        # the worker in this process: torch and megatron-core are imported here already
        # (a fresh worker per rank is what the user's torchrun gets; tests/gpu runs that)
        supervisor.SPAWNER.insert(0, InProcessChild(record=False))
        try:
            offloadprobe(cli)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
    return code


if __name__ == "__main__":
    cli = json.loads(sys.argv[3]) if len(sys.argv) > 3 else None
    sys.exit(main(Path(sys.argv[1]), json.loads(sys.argv[2]), cli))
