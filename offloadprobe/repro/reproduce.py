"""``reproduce(scenario)``: every expected strategy, scaled down, each in a fresh child."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path

from offloadprobe.core import environment
from offloadprobe.core.config import ModelConfig, size_for_payload
from offloadprobe.core.devices import guess_device
from offloadprobe.core.errors import UsageError
from offloadprobe.isolation import zygote
from offloadprobe.layout.terms import Term
from offloadprobe.repro.children import base_config
from offloadprobe.repro.gpu import calibrate, optimizer_choice, run_gpu_job
from offloadprobe.repro.host import HostJob, run_host_job
from offloadprobe.repro.records import Repro, ReproOutcome
from offloadprobe.repro.scaling import gpu_scaling, host_scaling
from offloadprobe.scenarios.schema import Expectation, Scenario


def probe_model(s: Scenario) -> ModelConfig:
    """The probe model sized for the scenario's ``[repro] payload``."""
    if s.repro is None:
        raise UsageError(f'{s.path}: repro: missing [repro] table; add payload = "64MiB"')
    return size_for_payload(ModelConfig(), s.repro.payload)


def selected(s: Scenario, only: Sequence[str]) -> list[Expectation]:
    """The scenario's expectations, restricted to ``only`` when given."""
    known = [e.strategy for e in s.expect] + [f"{e.kind}.{e.strategy}" for e in s.expect]
    unknown = [name for name in only if name not in known]
    if unknown:
        raise UsageError(
            f"--only {unknown[0]}: {s.path.name} expects nothing of it; choose from "
            + ", ".join(e.strategy for e in s.expect)
        )
    return [
        e for e in s.expect if not only or e.strategy in only or f"{e.kind}.{e.strategy}" in only
    ]


def reproduce(
    s: Scenario,
    *,
    device: str = "auto",
    only: Sequence[str] = (),
    train_steps: int | None = None,
    cycles: int | None = None,
    gpu_limit_floor: int = 0,
    timeout_s: float | None = None,
    use_cgroup: bool = True,
    on_start: Callable[[str], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> Repro:
    """Run every selected expectation of ``s`` at the ``[repro]`` scale; first say (to
    ``on_warning``, and in the record's ``warnings``) each outcome this host is projected
    not to reproduce, and why (``repro.caveats``)."""
    from offloadprobe.repro.caveats import caveats

    model = probe_model(s)
    expectations = selected(s, only)
    resolved = guess_device(device)
    emulated = resolved == "cpu"
    if cycles is None:
        cycles = s.repro.cycles if s.repro else 3
    if cycles < 1:
        raise UsageError(f"--cycles must be at least 1, got {cycles}")
    warnings = caveats(s, model, expectations, device=resolved, cycles=cycles)
    for line in warnings if on_warning is not None else ():
        on_warning(line)
    zygote.expect(len(expectations))
    options = dict(s.repro.options) if s.repro else {}
    if train_steps is None:
        train_steps = int(options.pop("train_steps", 0))
    else:
        options.pop("train_steps", None)
    outcomes: list[ReproOutcome] = []
    host_terms, gpu_terms, scale = (), (), ""
    params = [e for e in expectations if e.kind == "params"]
    optimizers = [e for e in expectations if e.kind == "optimizer"]
    with tempfile.TemporaryDirectory(prefix="offloadprobe-repro-") as tmp:
        work = Path(tmp)
        if params:
            scaling = host_scaling(s, model)
            host_terms, scale = scaling.terms, scaling.scale.describe()
            ranks = s.repro.ranks_per_node if s.repro else 1
            if ranks > 1:
                host_terms += (
                    Term(
                        label="scaled node limit",
                        formula=f"{ranks} ranks per node ([repro] ranks_per_node) x the "
                        "scaled per-rank limit",
                        value=ranks * scaling.limit,
                    ),
                )
            config = base_config(
                model, device=resolved, cycles=cycles, train_steps=train_steps, options=options
            )
            for e in params:
                if on_start is not None:
                    on_start(e.strategy)
                job = HostJob(
                    strategy=e.strategy,
                    expected=e.outcome,
                    config=config,
                    limit=ranks * scaling.limit,
                    timeout_s=timeout_s,
                    ranks=ranks,
                    device=resolved,
                )
                outcomes.append(run_host_job(job, work, use_cgroup=use_cgroup))
        if optimizers:
            gscaling = gpu_scaling(s, model)
            scale = scale or gscaling.scale.describe()
            config = replace(
                base_config(
                    model,
                    device=resolved,
                    cycles=cycles,
                    train_steps=max(1, train_steps),
                    options=options,
                ),
                optimizer=optimizer_choice(s),
            )
            if on_start is not None:
                on_start("calibration")
            ranks = s.repro.ranks_per_node if s.repro else 1
            settings, why = calibrate(
                config, gscaling, work, timeout_s, gpu_limit_floor, ranks=ranks, device=resolved
            )
            gpu_terms = gscaling.terms + (settings.terms if settings else ())
            for e in optimizers:
                if settings is None:
                    outcomes.append(
                        ReproOutcome(
                            strategy=e.strategy,
                            kind="optimizer",
                            expected=e.outcome,
                            observed="error",
                            detail=why,
                            method="--gpu-limit + --rollout-claim",
                        )
                    )
                    continue
                if on_start is not None:
                    on_start(e.strategy)
                outcomes.append(
                    run_gpu_job(
                        e.strategy,
                        e.outcome,
                        config,
                        settings,
                        work,
                        emulated=emulated,
                        timeout_s=timeout_s,
                        ranks=ranks,
                        device=resolved,
                    )
                )
    notes = []
    if params:
        notes.append(
            f"host children run --train-steps {train_steps}; the limit is held from each "
            "offload to the end of its load (the phases summary.host_peak_bytes covers)"
        )
        if s.repro and s.repro.ranks_per_node > 1:
            notes.append(
                f"{s.repro.ranks_per_node} ranks per child, started through torchrun's "
                "launcher in one node cgroup that holds the scaled node limit"
            )
    if emulated:
        notes.append("CPU emulation: no pinned memory, so no power-of-two rounding on the host")
    return Repro(
        scenario=s.name,
        path=str(s.path),
        device=resolved,
        emulated=emulated,
        model=asdict(model),
        scale=scale,
        host_terms=host_terms,
        gpu_terms=gpu_terms,
        method="; ".join(dict.fromkeys(o.method for o in outcomes)),
        outcomes=outcomes,
        versions=environment.versions(),
        notes=notes,
        warnings=warnings,
    )
