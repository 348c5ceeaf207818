"""Shared fixtures. Conventions for every test in this suite:

- CLI logic (flags, exit codes, one-line errors, what is printed or written): ``invoke``
  runs ``offloadprobe ARGS`` in this process through the real entry point ``main()``
  under Typer's ``CliRunner`` isolation. Pair it with ``fake_runner`` (tests/fakes.py)
  when the test is about what the CLI does with a result, not about the measurement.
- Real measurements in this process: the real runner, on a small model (``SMALL_MODEL``
  or smaller), shared by a module- or session-scoped fixture; never more cycles than the
  assertion needs.
- A fresh process (``run_cli``, ``isolation.run_child``) only where process isolation is
  what is tested: compare's child per strategy, a killed child, a cgroup limit, the
  console entry point itself. Such a module says how many processes it starts,
  ``pytestmark = pytest.mark.processes(N)``, and runs first (``_heavy_files_first``).
- Noisy readings are asserted as invariants with margins; exact values only on fakes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Workers share the host's cores with each other and with the children they start: one
    # intra-op thread each (before torch is imported here or in a child), as torchrun gives
    # the ranks of a node; more only spin against each other on a 2-core host.
    os.environ.setdefault("OMP_NUM_THREADS", "1")


# glibc's mmap threshold fixed at 128 KiB in every process of the session (this one below,
# in pytest_configure; its children, workers and zygotes by glibc's own variable): tests run
# many emulated runs in one process, and under glibc's dynamic threshold each run's host
# figures would depend on the frees of the tests before it (a block's first free raises the
# threshold for the process's life). CPU emulation's default keeps glibc's own behaviour and
# says so in its notes, or that it found the threshold fixed ("fixed before this run");
# tests/unit/test_glibc_malloc.py and tests/integration/test_emulation_malloc_cpu.py test the
# default in interpreters started without the variable. On a GPU host too (its CPU tests
# emulate as CI's do: on the H200 four of them read a freed transient as held without it),
# except in a session that runs tests/gpu alone: those measure glibc as the user's process
# has it.
def _gpu_tests_alone(argv: list[str]) -> bool:
    paths = [a for a in argv[1:] if not a.startswith("-") and ("/" in a or a.endswith(".py"))]
    return bool(paths) and all(Path(a.split("::")[0]).parts[:2] == ("tests", "gpu") for a in paths)


if not _gpu_tests_alone(sys.argv):
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "131072")

# Every worker this session starts imports the test strategies (tests.integration...): the
# checkout is on every process's path from the start, the zygote's too (a job with a path
# of its own would be a fresh interpreter: ``isolation.zygote``).
os.environ["PYTHONPATH"] = os.pathsep.join(
    dict.fromkeys(
        [str(Path(__file__).resolve().parents[1])]
        + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
)

from tests.fakes import FakeRunner, environment_restored, install_runner  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# A tiny model (2.5 MiB of parameters) for in-process tests of verdicts and exit codes.
TINY = [
    "--device",
    "cpu",
    "--layers",
    "1",
    "--hidden",
    "256",
    "--heads",
    "4",
    "--vocab",
    "1024",
    "--seq-length",
    "32",
    "--micro-batch",
    "1",
    "--cycles",
    "1",
    "--no-reference-check",
]
# A small model that still moves tens of MiB, so host effects stand far above noise.
SMALL_MODEL = ["--layers", "2", "--payload", "48MiB", "--seq-length", "32", "--micro-batch", "1"]
# The smallest model that still builds megatron's real objects: for tests of wiring,
# integrity and exit codes, not of host-memory magnitudes.
TINY_MODEL = [
    "--layers",
    "1",
    "--hidden",
    "128",
    "--heads",
    "4",
    "--vocab",
    "1024",
    "--seq-length",
    "32",
    "--micro-batch",
    "1",
]


def with_flags(base: list[str], **changes: str | bool | None) -> list[str]:
    """``base`` (flags such as ``TINY``) with some replaced or dropped, since the CLI refuses a
    flag given twice with two values: ``with_flags(TINY, hidden="128", cycles=None)``
    (None drops it, as ``--sequence`` needs); a boolean by its name,
    ``reference_check=True`` for ``--reference-check`` in place of ``--no-reference-check``."""
    pairs: list[list[str]] = []
    for token in base:
        if token.startswith("--") or not pairs:
            pairs.append([token])
        else:
            pairs[-1].append(token)
    out = []
    for name, value in changes.items():
        flag = "--" + name.replace("_", "-")
        pairs = [p for p in pairs if p[0] not in (flag, "--no-" + flag[2:])]
        if value is True:
            out.append(flag)
        elif value is False:
            out.append("--no-" + flag[2:])
        elif value is not None:
            out += [flag, value]
    return [t for p in pairs for t in p] + out


SUBPROCESS_TIMEOUT = 600
"""Seconds a child ``offloadprobe`` may take: generous, the 2-core CI host is shared."""


# ------------------------------------------------------------------ CPU time per test
# Wall-clock durations on a shared 2-core host say more about the neighbours than about
# the suite; ``--cpu-durations N`` lists the tests that used the most CPU (the process that
# ran them and the children it waited for), which does not depend on the load. Under
# xdist each worker measures its own tests and hands the figure over in the report.

_START = pytest.StashKey[float]()
_SPENT: list[tuple[float, str]] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-durations",
        type=int,
        default=None,
        metavar="N",
        help="show the N tests that used the most CPU seconds (0: all)",
    )


def _cpu_seconds() -> float:
    import resource

    own, children = (
        resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.config.getoption("--cpu-durations") is not None:
        item.stash[_START] = _cpu_seconds()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.when == "teardown" and _START in item.stash:
        report.user_properties.append(("cpu_seconds", _cpu_seconds() - item.stash[_START]))
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for key, value in report.user_properties:
        if key == "cpu_seconds" and report.when == "teardown":
            _SPENT.append((value, report.nodeid))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    count = config.getoption("--cpu-durations")
    if count is None:
        return
    spent = sorted(_SPENT, reverse=True)
    terminalreporter.write_sep("=", f"CPU seconds: {sum(s for s, _ in spent):.1f} in tests")
    for seconds, nodeid in spent[: count or None]:
        terminalreporter.write_line(f"{seconds:8.2f}s  {nodeid}")


def pytest_configure(config: pytest.Config) -> None:
    """Where tests run (a worker, or the one process without xdist) on a host without CUDA:
    import megatron-core as CPU emulation does at a run's start (``eager_fusions``), once,
    before the test modules import it, instead of compiling its helpers' wrappers first."""
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        return  # the xdist controller runs no test
    from offloadprobe.core import collector

    # As the CLI's entry point does: seldom a cyclic collection while torch, megatron-core
    # and the test modules are imported (not some 950 walks over a growing heap); what they
    # made is frozen once the tests are collected (``pytest_collection_finish``).
    collector.pause_for_imports()
    from offloadprobe.engine.runtime import glibc_malloc

    if os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        glibc_malloc.fix_malloc_threshold()  # as the variable above does for the children
    _workers_in_this_process()
    import torch

    if not torch.cuda.is_available():
        from offloadprobe.engine.runtime.eager import eager_fusions

        eager_fusions()


def _workers_in_this_process() -> None:
    """A verb's workers run in the test's process by default (``tests.fakes.InProcessChild``):
    a fresh interpreter costs seconds of CPU, and what most tests check does not depend on
    it. A test of isolation itself (a kill, a cgroup, a signal, ``os._exit``) asks for real
    workers: ``invoke_cli(..., isolated=True)``, ``supervisor.using(subprocess_spawner)``,
    or a fresh ``offloadprobe`` process (``run_cli``), whose workers are real. Real
    CPU-emulation workers of this process all fork from a zygote, one per environment, the
    first of each too: a test session starts them again and again
    (``zygote.expect_a_session``); a fresh ``offloadprobe run`` starts its one worker as a
    fresh interpreter."""
    from offloadprobe.isolation import supervisor, zygote
    from tests.fakes import InProcessChild

    supervisor.SPAWNER.insert(0, InProcessChild(record=False))
    zygote.expect_a_session()


@pytest.fixture(autouse=True)
def _environment_kept():
    """What a test leaves in ``os.environ`` is undone after it: megatron-core's NVTE_* and
    CUBLAS_WORKSPACE_CONFIG from a model built in this process, torch's
    TORCHINDUCTOR_CACHE_DIR from a lazy import. The next test starts from the session's
    environment, and the session's real workers fork from one zygote per environment
    (``isolation.zygote`` keys them by it), not from one more per variable left behind."""
    with environment_restored():
        yield


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """One worker where a GPU is: the GPU tests read device-wide memory (``mem_get_info``,
    the pinned cache) and must not share the device with each other. Elsewhere, xdist's
    own count (one per core, at most 4 here). Without an NVIDIA device node there is no
    GPU to find, and the controller does not import torch to be told so."""
    if not Path("/dev/nvidiactl").exists():
        return None
    import torch

    return 1 if torch.cuda.is_available() else None


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what exists once the tests are collected (torch, pytest, every test module)
    and put the collector's thresholds back: a runtime's full collection then skips them
    (``cuda_shims.long_lived_objects_frozen``) instead of walking them again at every
    in-process run. Nothing here unfreezes them."""
    from offloadprobe.core import collector

    collector.resume()  # collects, freezes what survived, default thresholds again


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _heavy_files_first(items)
    import torch  # here, not at the top: the xdist controller never imports it

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


def _processes(item: pytest.Item) -> int:
    marker = item.get_closest_marker("processes")
    return int(marker.args[0]) if marker is not None else 0


def _heavy_files_first(items: list[pytest.Item]) -> None:
    """Files that start the most real processes run first (``pytest.mark.processes(N)`` on
    the module: N processes that import torch). xdist hands out whole files in this order
    (``--no-loadscope-reorder``) to whichever worker is free, so the long files start at
    once and the short ones fill in behind them; the order within a file is kept."""
    weight: dict[str, int] = {}
    for item in items:
        weight[_file(item)] = max(weight.get(_file(item), 0), _processes(item))
    items.sort(key=lambda item: -weight[_file(item)])  # stable


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


# ------------------------------------------------------------------ in-process CLI


_WROTE = re.compile(r"wrote (JSON|Markdown|trace|plot) ")


@dataclass(frozen=True)
class CliResult:
    """What ``offloadprobe ARGS`` did: exit code and the two streams, as text."""

    exit_code: int
    stdout: str
    stderr: str

    def __iter__(self):
        """``rc, stdout, stderr = invoke(...)``."""
        return iter((self.exit_code, self.stdout, self.stderr))

    @property
    def error_lines(self) -> list[str]:
        """What stderr says, less the lines naming a file written (``wrote JSON x.json``)."""
        return [
            line for line in self.stderr.splitlines() if line.strip() and not _WROTE.match(line)
        ]


def invoke_cli(
    *args: str, env: dict[str, str] | None = None, columns: int = 120, isolated: bool = False
) -> CliResult:
    """``offloadprobe ARGS`` in this process, through the console entry point ``main()``.

    ``main()`` is what turns errors into exit codes and one-line messages, so it is
    called as is, inside ``CliRunner``'s isolation (captured streams, patched env). Its
    workers run in this process too (see ``pytest_configure``), unless the test put another
    stand-in in their place, or ``isolated``: real worker processes (a cgroup, a kill).
    """
    import contextlib

    from typer.testing import CliRunner

    from offloadprobe.cli import main
    from offloadprobe.isolation import supervisor

    code = 0
    real = supervisor.using(supervisor.subprocess_spawner) if isolated else contextlib.nullcontext()
    with real, CliRunner().isolation(env={"COLUMNS": str(columns), **(env or {})}) as streams:
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        out, err = streams[0].getvalue(), streams[1].getvalue()
    return CliResult(code, out.decode(), err.decode())


@pytest.fixture
def invoke():
    return invoke_cli


@pytest.fixture
def fake_runner(monkeypatch) -> FakeRunner:
    """``offloadprobe run`` answered by a ``FakeRunner`` (no model, no torch work)."""
    return install_runner(monkeypatch, FakeRunner())


# ------------------------------------------------------------------ fresh processes


def run_cli(
    *args: str, cwd: Path | None = None, env: dict | None = None, timeout: int = SUBPROCESS_TIMEOUT
):
    """Run ``python -m offloadprobe ARGS`` in a fresh process, as a user would."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    full_env = {**os.environ, "PYTHONPATH": path, "COLUMNS": "120", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "offloadprobe", *args],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        env=full_env,
        timeout=timeout,
    )


@pytest.fixture
def cli():
    return run_cli


def run_each(tmp_dir: Path, specs, *args: str, timeout: int = SUBPROCESS_TIMEOUT) -> dict:
    """``offloadprobe run ARGS --strategy S --json`` per spec, each in a fresh process.

    Returns ``{spec: (report dict, stdout)}``; any failing run fails the caller.
    """
    out = {}
    for index, spec in enumerate(specs):
        path = tmp_dir / f"run-{index}.json"
        proc = run_cli(
            "run", "--strategy", spec, "--no-progress", "--json", str(path), *args, timeout=timeout
        )
        assert proc.returncode == 0, proc.stderr + proc.stdout
        out[spec] = (json.loads(path.read_text()), proc.stdout)
    return out


def cgroup_reason() -> str | None:
    """Why no memory cgroup can be made here (None: one can); tests that need one skip."""
    import os

    from offloadprobe.measure.cgroup import CgroupUnavailable, create_group

    try:
        group = create_group(f"offloadprobe-test-{os.getpid()}")
    except CgroupUnavailable as why:
        return str(why)
    group.remove()
    return None
