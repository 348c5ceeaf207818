"""What the repro's child processes share: their flags, and the gate a parent holds them at."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offloadprobe.core.config import ModelConfig, RunConfig
from offloadprobe.core.records import RunRecord
from offloadprobe.isolation.rows import Row, measure


def base_config(
    model: ModelConfig,
    *,
    device: str,
    cycles: int,
    train_steps: int,
    options: dict[str, Any] | None = None,
) -> RunConfig:
    """The configuration every child of one repro shares (strategies filled in per child):
    the scenario's own ``[repro]`` options (``seed``...), then these."""
    from dataclasses import replace

    from offloadprobe.core.options import build_config

    base = build_config(dict(options or {}))
    return replace(
        base,
        model=model,
        device=device,
        cycles=cycles,
        train_steps=train_steps,
        reference_check=False,
    )


class GateKeeper(threading.Thread):
    """Serves a gated child's pauses: for each ``ready-N``, runs ``on_event``, writes ``go-N``.

    ``on_event`` gets the pause's ``{"event", "cycle", "phase"}`` while the child waits
    (see ``offloadprobe.measure.phase_log``); errors are kept, and the child is let go anyway.
    The folder is looked at every ``poll_s`` at first and after each pause, then ever less
    often while nothing comes, down to every ``max_poll_s``: a child spends most of its
    life importing and training between pauses, and at 2 ms throughout this thread took
    about 7% of a core (and the GIL) for as long as the child ran. A pause waits at most
    ``max_poll_s`` longer; nothing is measured while a child waits at its gate.
    """

    def __init__(
        self,
        directory: Path,
        on_event: Callable[[dict[str, Any]], None],
        poll_s: float = 0.002,
        max_poll_s: float = 0.02,
    ) -> None:
        super().__init__(daemon=True)
        self.directory = directory
        self.on_event = on_event
        self.poll_s = poll_s
        self.max_poll_s = max(max_poll_s, poll_s)
        self.events: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        seq = 0
        wait = self.poll_s
        while not self._stop_event.wait(wait):
            ready = self.directory / f"ready-{seq}"
            if not ready.exists():
                wait = min(wait * 2, self.max_poll_s)
                continue
            wait = self.poll_s
            info = json.loads(ready.read_text())
            self.events.append(info)
            try:
                self.on_event(info)
            except Exception as exc:  # reported in the outcome, never a crash
                self.errors.append(f"cycle {info.get('cycle')} {info.get('phase')}: {exc}")
            finally:
                (self.directory / f"go-{seq}").touch()
            seq += 1

    @property
    def reached(self) -> bool:
        return bool(self.events)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


@dataclass(frozen=True, slots=True)
class Child:
    """One repro child: a measured row, read the way the repro judges it."""

    row: Row

    @property
    def exit_code(self) -> int:
        return self.row.outcome.exit_code

    @property
    def verdict(self) -> str:
        return "ok" if self.row.verdict.ok else self.row.verdict.line()

    @property
    def stderr_tail(self) -> str:
        return self.row.outcome.stderr_tail

    @property
    def killed_at(self) -> tuple[int | None, str | None]:
        """The cycle and phase a killed child was in (its phase log)."""
        return self.row.verdict.cycle, self.row.verdict.phase

    @property
    def run(self) -> RunRecord | None:
        """The child's run record, if it wrote one."""
        return self.row.run if self.row.outcome.report is not None else None


def run_child(
    config: RunConfig,
    *,
    device: str,
    timeout_s: float | None = None,
    gate: Callable[[dict[str, Any]], None] | None = None,
    keepers: list[GateKeeper] | None = None,
    cgroup: Any = None,
    node_cgroup: str | None = None,
    launch: Any = None,
    env: dict[str, str] | None = None,
    nproc_per_node: int = 1,
    amend: Callable[[Any], Any] | None = None,
) -> Child:
    """Run ``config`` in a worker; with ``gate``, the worker pauses at every offload's start
    and load's end and ``gate`` is called there (its errors end up in ``keepers``)."""

    def started(job: Any) -> GateKeeper:
        keeper = GateKeeper(job.gate_dir, gate)  # type: ignore[arg-type]
        keeper.start()
        if keepers is not None:
            keepers.append(keeper)
        return keeper

    row = measure(
        config,
        device=device,
        timeout_s=timeout_s,
        gate=gate is not None,
        on_started=started if gate is not None else None,
        cgroup=cgroup,
        node_cgroup=node_cgroup,
        launch=launch,
        env=env,
        nproc_per_node=nproc_per_node,
        amend=amend,
    )
    return Child(row)
