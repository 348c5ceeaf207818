"""The zero before any strategy code, in CPU emulation (issue 35, point 4).

GIVEN a strategy that takes host memory through a forward hook in cycle 0's train phase,
and one that frees host memory the process held before any strategy code ran,
WHEN ``offloadprobe run`` measures them (in this process, the smallest real model, one
cycle, no reference run),
THEN the hook's bytes (written page by page by the test's strategy: the truth) show in the
host figures, measured against a model trained without strategies; the host below the
zero is ``inconsistent``, exit 1.
"""

from __future__ import annotations

import contextlib
import json

import pytest

from offloadprobe.cli import main
from offloadprobe.core.host_zero import GROWTH_NOISE
from tests.conftest import TINY_MODEL
from tests.integration import zero_strategies
from tests.integration.zero_strategies import GRAB

ZERO = "tests.integration.zero_strategies:"
COMMON = ["run", "--device", "cpu", "--no-progress", "--cycles", "1", *TINY_MODEL]
MiB = 2**20


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``run(*args) -> (exit code, the run's record, stderr)``, each once; ``isolated``: in a
    real worker (in this process the framework's growth a run measures depends on the
    tests before it: read high once in the whole suite, the hook's block uncounted)."""
    from offloadprobe.isolation import supervisor

    folder = tmp_path_factory.mktemp("zero")
    cache: dict[tuple[str, ...], tuple[int, dict, str]] = {}

    def go(*args: str, capsys, isolated: bool = False) -> tuple[int, dict, str]:
        if args not in cache:
            out = folder / f"run-{len(cache)}.json"
            capsys.readouterr()
            try:
                real = supervisor.using(supervisor.subprocess_spawner) if isolated else None
                with real or contextlib.nullcontext():
                    main([*COMMON, "--json", str(out), *args])
                code = 0
            except SystemExit as exit_:
                code = int(exit_.code or 0)
            cache[args] = (code, json.loads(out.read_text())["runs"][0], capsys.readouterr().err)
        return cache[args]

    return go


def test_host_taken_by_a_hook_before_the_first_offload_counts(runs, capsys):
    code, run, err = runs(
        "--strategy",
        ZERO + "GrabsInFirstTrain",
        "--no-reference-check",
        capsys=capsys,
        isolated=True,
    )
    assert code == 0, err
    summary, payload = run["summary"], run["payload_bytes"]
    # the pageable copy and the hook's block, every page of it written
    assert summary["steady_host_bytes"] >= GRAB
    # within 10%, plus the growth the rule lets pass as noise (GROWTH_NOISE: once 1.1 MiB over)
    margin = 0.10 * (payload + GRAB) + GROWTH_NOISE
    assert abs(summary["steady_host_bytes"] - (payload + GRAB)) <= margin
    assert summary["host_peak_bytes"] >= GRAB
    # measured against a model trained without strategies, not assumed
    assert run["framework_growth_bytes"] is not None
    assert run["pre_offload_counted_bytes"] >= 0.9 * GRAB
    assert any("before the first offload grew the host" in n for n in run["notes"])


def test_host_freed_below_the_zero_is_inconsistent(runs, capsys):
    zero_strategies.BEFORE_THE_RUN.append(zero_strategies.written(GRAB))
    try:
        code, run, err = runs(
            "--strategy",
            ZERO + "FreesWhatWasThereBefore",
            "--no-reference-check",
            "--train-steps",
            "0",
            capsys=capsys,
        )
    finally:
        zero_strategies.BEFORE_THE_RUN.clear()
    assert code == 1, err
    assert run["outcome"]["kind"] == "inconsistent", run["outcome"]
    assert run["outcome"]["detail"].startswith("steady host -"), run["outcome"]
    assert "below the host before the strategies ran" in run["outcome"]["detail"]
    assert run["summary"]["steady_host_bytes"] < -(GRAB // 2)
    assert "Traceback" not in err
