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

import contextlib
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any

from offloadprobe.core.config import RunConfig
from offloadprobe.core.outcomes import Failure
from offloadprobe.core.records import HostReading, PhaseRecord, Report, ResidencyFact, RunRecord
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
    residency = [
        ResidencyFact(
            cycle=c,
            param_bytes_to_move=payload,
            param_bytes_left=left.get("param_data", 0),
            param_offload_gave_bytes=payload - left.get("param_data", 0),
            built_on_device_bytes=0,
            moves_optimizer=optimizer_strategy != "none",
            optimizer_state_bytes=0,
            optimizer_moved_bytes=0,
            left_by_owner=left,
        )
        for c in range(cycles)
        if failure is None
    ]
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
        failure=(
            Failure(kind=failure_kind, message=failure, cycle=0, phase="offload")
            if failure is not None
            else None
        ),
        optimizer_strategy=optimizer_strategy,
        optimizer=optimizer,
        residency=residency,
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
        record = replace(record, label_override=cfg.label)  # as the real runner records it
        for rec in record.phases:
            if hooks is not None and hooks.on_start is not None:
                hooks.on_start(rec.cycle, rec.phase)
            if hooks is not None and hooks.on_phase is not None:
                hooks.on_phase(rec)
        return fake_report(
            record, device=cfg.device if cfg.device != "auto" else "cpu", model=asdict(cfg.model)
        )

    @property
    def last(self) -> RunConfig:
        return self.configs[-1]


def install_runner(monkeypatch: Any, runner: FakeRunner) -> FakeRunner:
    """Put ``runner`` where the worker looks for the real one, and run workers in this
    process (the fake is in this process's modules)."""
    import importlib

    real = importlib.import_module("offloadprobe.engine.runner").run
    _replace_everywhere(monkeypatch, "run", real, runner)
    install_child(monkeypatch, InProcessChild())
    return runner


def import_all() -> None:
    """Import every offloadprobe module (pytester drops modules first imported in a test)."""
    import importlib
    import pkgutil

    import offloadprobe

    for info in pkgutil.walk_packages(offloadprobe.__path__, "offloadprobe."):
        if info.name.endswith("__main__") or ".bootstrap" in info.name:
            continue  # an entry point, and the attach bootstrap (it acts when imported)
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as exc:  # an optional backend (Triton) absent here
            if (exc.name or "").startswith("offloadprobe"):
                raise


def _replace_everywhere(monkeypatch: Any, attr: str, real: Any, fake: Any) -> None:
    """Set ``attr`` to ``fake`` in every offloadprobe module that holds ``real``.

    Every module is imported first: one imported while the fake is in place would bind
    it for good (``from ... import``), and monkeypatch would later "restore" the fake.
    """
    import_all()
    for name, module in list(sys.modules.items()):
        if name.startswith("offloadprobe.") and getattr(module, attr, None) is real:
            monkeypatch.setattr(module, attr, fake)


@dataclass(frozen=True)
class SpawnedRow:
    """What a verb asked a worker to do, for tests to check the arguments it built."""

    config: RunConfig
    env: dict[str, str]
    timeout_s: float | None
    job: Any

    @property
    def label(self) -> str:
        return self.config.label or f"{self.config.strategy} + {self.config.optimizer_strategy}"


class FakeChild:
    """Stands in for the worker process: no process is started, no torch work done.

    ``runs`` maps a worker's model strategy to ``fake_run`` keyword arguments; ``specs``
    keeps what every worker was asked (``SpawnedRow``). It writes the worker's result as a
    worker would, so the real supervisor reads and judges it. Only for logic around
    workers; isolation itself is tested for real.
    """

    def __init__(self) -> None:
        self.runs: dict[str, dict[str, Any]] = {}
        self.specs: list[SpawnedRow] = []

    def __call__(self, job: Any, spec: Any) -> tuple[int, str]:
        from offloadprobe.core.job import WorkerResult
        from offloadprobe.core.verdicts import judge

        self.specs.append(SpawnedRow(job.config, dict(spec.env), spec.timeout_s, job))
        strategy = job.config.strategy
        record = fake_run(strategy, **self.runs.get(strategy, {}))
        code = judge(record)[0].exit_code
        WorkerResult(exit_code=code, report=fake_report(record).to_dict()).write(
            job.result_path(None)
        )
        return code, ""


class InProcessChild:
    """The real worker, in this process: ``engine.worker.serve`` on the job.

    For verbs whose logic around workers is under test where the result does not depend
    on being a fresh process. A worker killed by a signal cannot be had this way: test
    those with real processes (``run_cli``).
    """

    def __init__(self, workdir: Any = None, *, record: bool = True, group: bool = False) -> None:
        self.specs: list[SpawnedRow] = []
        self.record = record
        self.isolates = group
        """Run in the worker's own memory cgroup, as a real worker does: this process moves
        into the group the supervisor made for the call and back out after it (what it
        held before stays charged where it was; the figures are rises over a baseline)."""

    def __call__(self, job: Any, spec: Any) -> tuple[int, str]:
        from offloadprobe.engine.worker import serve

        if self.record:
            self.specs.append(SpawnedRow(job.config, dict(spec.env), spec.timeout_s, job))
        keeper = spec.on_started(job) if spec.on_started is not None else None
        try:
            # the worker's environment dies with it in a real process: whatever it sets here
            # (the row's variables, and torch's and megatron-core's own:
            # TORCHINDUCTOR_CACHE_DIR, CUBLAS_WORKSPACE_CONFIG, NVTE_*) is undone afterwards
            with environment_restored():
                os.environ.update(spec.env)
                home = None
                if self.isolates and spec.cgroup is not None:
                    from offloadprobe.measure.cgroup import home_procs

                    home = home_procs(spec.cgroup)
                    spec.cgroup.join()
                try:
                    return serve(job), ""
                finally:
                    if home is not None:
                        home.write_text(str(os.getpid()))
        finally:
            if keeper is not None:
                keeper.stop()


@contextlib.contextmanager
def environment_restored() -> Iterator[None]:
    """``os.environ`` as it was when the block began, once it ends: what the block (or the
    code it ran) set, changed or removed is undone."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        if os.environ != saved:
            for key in set(os.environ) - set(saved):
                del os.environ[key]
            for key, value in saved.items():
                if os.environ.get(key) != value:
                    os.environ[key] = value


def install_child(monkeypatch: Any, child: Any) -> Any:
    """Run every worker through ``child`` (a ``FakeChild`` or an ``InProcessChild``)."""
    from offloadprobe.isolation import supervisor

    monkeypatch.setattr(supervisor, "SPAWNER", [child, *supervisor.SPAWNER])
    return child
