"""Stand-ins for the expensive parts, for tests of CLI, plugin and reporting logic.

- ``fake_run`` / ``fake_report``: hand-built records whose summary has exactly the
  figures asked for (exact asserts are fine on these).
- ``FakeRunner`` (fixture ``fake_runner``): replaces ``offloadprobe.engine.runner.run``;
  no model, no torch work. For what ``offloadprobe run`` does with a result.
- ``FakeChild`` / ``InProcessChild`` with ``install_child``: replace ``run_child`` (no
  new interpreter). For the logic around children, never for isolation itself.

The module imports no torch at import time. What a strategy really does to memory is
tested on the real runner (see ``tests/conftest.py``).

    def test_breach_exits_1(invoke, fake_runner):
        fake_runner.runs["naive"] = dict(host_peak_x=2.1)
        result = invoke("run", "--strategy", "naive", "--max-host-peak", "1.5x")
        assert result.exit_code == 1
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from offloadprobe.core.config import RunConfig
from offloadprobe.core.records import HostReading, PhaseRecord, Report, RunRecord
from offloadprobe.measure.summary import summarise

MiB = 2**20
PAYLOAD = 48 * MiB
BASE = 1000 * MiB
"""Host RSS of the fake process before its first offload."""
VERSIONS = {"torch": "0.0-fake", "megatron_core": "0.0-fake", "cuda": None, "python": "3"}
EMULATION_NOTE = "CPU emulation (fake): no pinned memory, no GPU"


def _bytes(x: float, payload: int) -> int:
    return round(x * payload)


def _phase(cycle: int, name: str, *, before: int, after: int, peak: int, moved: int, **extra):
    seconds = 0.5 if name != "train" else 0.1
    return PhaseRecord(
        cycle=cycle,
        phase=name,
        seconds=seconds,
        bytes_moved=moved,
        gbps=moved / seconds / 1e9 if moved else None,
        host=HostReading(
            rss_before=BASE + before,
            rss_after=BASE + after,
            peak=BASE + max(peak, before, after),
            shmem_after=0,
            method="vmhwm",
        ),
        pinned=None,
        gpu=None,
        cgroup=None,
        **extra,
    )


def fake_run(
    strategy: str = "lazy",
    *,
    payload: int = PAYLOAD,
    cycles: int = 2,
    host_peak_x: float = 1.0,
    steady_x: float = 1.0,
    integrity: Iterable[str] = (),
    failure: str | None = None,
    failure_kind: str = "out of memory",
    left_on_device: dict[str, int] | None = None,
    optimizer_strategy: str = "none",
    optimizer: str = "fake Adam",
    notes: Iterable[str] = (EMULATION_NOTE,),
) -> RunRecord:
    """One strategy's run whose summary has exactly these figures.

    Host figures are multiples of ``payload`` over a fixed baseline: the first offload
    reaches ``host_peak_x``, every offload leaves ``steady_x`` behind. A run with a
    ``failure`` (of ``failure_kind``) stops in cycle 0's offload and has no summary, as the
    real runner does.
    """
    peak, steady = _bytes(host_peak_x, payload), _bytes(steady_x, payload)
    left = dict(left_on_device) if left_on_device is not None else {"param_data": 0}
    phases: list[PhaseRecord] = []
    for cycle in range(cycles):
        held = steady if cycle else 0
        phases.append(_phase(cycle, "train", before=held, after=held, peak=held, moved=0))
        if failure is not None:
            break
        offload = dict(before=held, after=steady, peak=peak, left_on_device=left)
        phases.append(_phase(cycle, "offload", moved=payload, **offload))
        load = dict(before=steady, after=steady, peak=steady)
        phases.append(_phase(cycle, "load", moved=payload, **load))
    problems = list(integrity)
    summary = None
    if failure is None:
        summary = summarise(
            phases,
            payload_bytes=payload,
            baseline_host_bytes=BASE,
            gpu_baseline_bytes=None,
            registered_bytes=0,
            integrity_ok=not problems,
        )
    return RunRecord(
        strategy=strategy,
        description=f"fake {strategy}",
        payload_bytes=payload,
        grad_bytes=2 * payload,
        baseline_host_bytes=BASE,
        gpu_baseline_bytes=None,
        phases=phases,
        summary=summary,
        integrity=problems,
        notes=list(notes),
        failure=failure,
        failure_kind=failure_kind if failure is not None else None,
        failure_cycle=0 if failure is not None else None,
        failure_phase="offload" if failure is not None else None,
        optimizer_strategy=optimizer_strategy,
        optimizer=optimizer,
    )


def fake_report(*runs: RunRecord, device: str = "cpu", model: dict[str, Any] | None = None):
    """A whole ``offloadprobe run`` result around ``runs`` (CPU emulation)."""
    runs = runs or (fake_run(),)
    return Report(
        device=device,
        emulated=device == "cpu",
        emulation_note=EMULATION_NOTE if device == "cpu" else None,
        payload_bytes=runs[0].payload_bytes,
        versions=dict(VERSIONS),
        machine={"hostname": "fake", "cpus": 2},
        model=model or {"num_layers": 2},
        settings={"strategy": runs[0].strategy, "cycles": len(runs[0].phases) // 3},
        runs=list(runs),
    )


class FakeRunner:
    """Stands in for ``offloadprobe.engine.runner.run``: no model, no torch.

    ``runs`` maps a strategy name to ``fake_run`` keyword arguments; strategies not
    listed get a healthy run (1.0x peak, bit-exact). Every call's ``RunConfig`` is
    kept in ``configs``, so a test can check what the CLI asked for.
    """

    def __init__(self) -> None:
        self.runs: dict[str, dict[str, Any]] = {}
        self.configs: list[RunConfig] = []

    def __call__(self, cfg: RunConfig, hooks: Any = None) -> Report:
        self.configs.append(cfg)
        kwargs = {"cycles": cfg.cycles, "optimizer_strategy": cfg.optimizer_strategy}
        record = fake_run(cfg.strategy, **{**kwargs, **self.runs.get(cfg.strategy, {})})
        for rec in record.phases:
            if hooks is not None and hooks.on_start is not None:
                hooks.on_start(rec.cycle, rec.phase)
            if hooks is not None and hooks.on_phase is not None:
                hooks.on_phase(rec)
        return fake_report(record, device=cfg.device if cfg.device != "auto" else "cpu",
                           model=asdict(cfg.model))  # fmt: skip

    @property
    def last(self) -> RunConfig:
        return self.configs[-1]


def install_runner(monkeypatch: Any, runner: FakeRunner) -> FakeRunner:
    """Put ``runner`` where ``offloadprobe run`` looks for the real one."""
    import importlib

    real = importlib.import_module("offloadprobe.engine.runner").run
    _replace_everywhere(monkeypatch, "run", real, runner)
    return runner


def import_all() -> None:
    """Import every offloadprobe module (pytester drops modules first imported in a test)."""
    import importlib
    import pkgutil

    import offloadprobe

    for info in pkgutil.walk_packages(offloadprobe.__path__, "offloadprobe."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)


def _replace_everywhere(monkeypatch: Any, attr: str, real: Any, fake: Any) -> None:
    """Set ``attr`` to ``fake`` in every offloadprobe module that holds ``real``.

    Every module is imported first: one imported while the fake is in place would bind
    it for good (``from ... import``), and monkeypatch would later "restore" the fake.
    """
    import_all()
    for name, module in list(sys.modules.items()):
        if name.startswith("offloadprobe.") and getattr(module, attr, None) is real:
            monkeypatch.setattr(module, attr, fake)


class FakeChild:
    """Stands in for ``offloadprobe.isolation.child.run_child``: no process is started.

    ``runs`` maps a child's model strategy to ``fake_run`` keyword arguments;
    ``specs`` keeps every ``ChildSpec`` asked for, so a test can check the arguments a
    caller built. Only for logic around children; isolation itself is tested for real.
    """

    def __init__(self) -> None:
        self.runs: dict[str, dict[str, Any]] = {}
        self.specs: list[Any] = []

    def __call__(self, spec: Any, **_: Any) -> Any:
        from offloadprobe.isolation.child import ChildOutcome

        self.specs.append(spec)
        strategy = spec.config.strategy
        record = fake_run(strategy, **self.runs.get(strategy, {}))
        return ChildOutcome(
            label=spec.label,
            exit_code=0,
            report=fake_report(record).to_dict(),
            failure=None,
            stderr_tail="",
        )


class InProcessChild:
    """``run_child`` without a new interpreter: the real ``offloadprobe run``, in this process.

    For verbs whose logic around children is under test (repro's GPU path in CPU
    emulation) where the child's result does not depend on being a fresh process. A
    child killed by a signal cannot be had this way: test those with real children.
    """

    def __init__(self, workdir: Any) -> None:
        self.workdir = workdir
        self.specs: list[Any] = []

    def __call__(self, spec: Any, **_: Any) -> Any:
        import json

        from offloadprobe.core.records import ChildFailure
        from offloadprobe.isolation.child import ERROR_FILE_ENV, ChildOutcome
        from offloadprobe.measure.phase_log import last_started
        from tests.conftest import invoke_cli

        self.specs.append(spec)
        n = len(self.specs)
        config, out = self.workdir / f"child-{n}.config.json", self.workdir / f"child-{n}.json"
        error, log = (
            self.workdir / f"child-{n}.error.json",
            spec.phase_log or (self.workdir / f"child-{n}.phases.jsonl"),
        )
        config.write_text(json.dumps(spec.config.to_dict()))
        result = invoke_cli("run", "--config", str(config), "--json", str(out), "--no-progress",
                            "--phase-log", str(log),
                            env={**spec.env, ERROR_FILE_ENV: str(error)})  # fmt: skip
        failure = None
        if result.exit_code != 0:
            said = json.loads(error.read_text()) if error.exists() else {}
            where = last_started(log) or (None, None)
            failure = ChildFailure(
                kind=said.get("kind", "crashed"),
                message=said.get("message", f"exit code {result.exit_code}"),
                exit_code=result.exit_code,
                cycle=where[0],
                phase=where[1],
            )
        return ChildOutcome(
            label=spec.label,
            exit_code=result.exit_code,
            report=json.loads(out.read_text()) if out.exists() else None,
            failure=failure,
            stderr_tail="\n".join(result.error_lines[-5:]),
        )


def install_child(monkeypatch: Any, child: Any) -> Any:
    """Put ``child`` in place of ``run_child`` wherever offloadprobe holds it.

    Modules that bound it with ``from ... import run_child`` are found by identity, so
    this keeps working as callers move; the module itself is looked up in
    ``sys.modules`` (not through its package's attribute), which stays right when
    pytester has dropped and re-imported it.
    """
    import importlib

    real = importlib.import_module("offloadprobe.isolation.child").run_child
    _replace_everywhere(monkeypatch, "run_child", real, child)
    return child
