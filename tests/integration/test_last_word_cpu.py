"""The parent has the last word (issue 35, point 5): a worker that moves itself out of its
memory cgroup, resets its group's peak, or rewrites its record at exit is judged by what
its parent saw, read and was told as it happened (``isolation.warden``).

Each truth is measured where the record under test cannot change it: the worker's
membership and survival from ``/proc``, the group's usage at the top of a transient as
the strategy read it from the kernel, the corruption the strategy made by construction.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

import pytest

from tests.conftest import cgroup_reason
from tests.fakes import InProcessChild, install_child
from tests.integration import last_word_strategies

pytestmark = pytest.mark.processes(2)  # two real workers, forked from the zygote

LAST = "tests.integration.last_word_strategies:"
RUN = [
    "run",
    "--device",
    "cpu",
    "--layers",
    "1",
    "--payload",
    "4MiB",
    "--seq-length",
    "32",
    "--micro-batch",
    "1",
    "--cycles",
    "1",
    "--train-steps",
    "0",
    "--no-reference-check",
    "--no-progress",
]
NO_CGROUP = cgroup_reason()
pytestmark = [pytestmark, pytest.mark.skipif(NO_CGROUP is not None, reason=f"{NO_CGROUP}")]


def _run(invoke, tmp_path: Path, strategy: str, *, isolated: bool) -> tuple[int, dict]:
    out = tmp_path / "run.json"
    result = invoke(*RUN, "--strategy", LAST + strategy, "--json", str(out), isolated=isolated)
    assert out.exists(), result.stderr
    (run,) = json.loads(out.read_text())["runs"]
    return result.exit_code, run


def test_a_worker_that_moves_itself_out_mid_offload_is_escaped_and_killed(invoke, tmp_path):
    """Before: ``ok`` at 0.0x steady, the copy held in a memfd charged to the parent's
    group, beyond any limit on the worker's."""
    code, run = _run(invoke, tmp_path, "MovesItselfOut", isolated=True)
    assert code == 1, run["verdict"]
    assert run["outcome"]["kind"] == "escaped", run["verdict"]
    assert (run["outcome"]["cycle"], run["outcome"]["phase"]) == (0, "offload"), run["verdict"]
    detail = run["outcome"]["detail"]
    assert "the measured process" in detail and "(killed)" in detail, detail
    pid = int(detail.split("pid ", 1)[1].split(",")[0])
    status = Path(f"/proc/{pid}/status")  # the truth: the kernel's, not the record's
    assert not status.exists() or "zombie" in status.read_text().lower()


def _per_fd_peak_reset() -> bool:
    """cgroup v1, or v2 on Linux >= 6.12 (``memory.peak`` reset per open file)."""
    from offloadprobe.measure.cgroup import own_group

    group = own_group()
    if group is None or group.version == 1:
        return True
    major, minor = (int(x) for x in platform.release().split(".")[:2])
    return (major, minor) >= (6, 12)


@pytest.mark.skipif(not _per_fd_peak_reset(), reason="cgroup v2 before Linux 6.12")
def test_a_transient_behind_a_reset_group_peak_is_still_the_peak(invoke, tmp_path, monkeypatch):
    """Before: the offload's peak read 1.0x, the transient's 2.0x hidden by a reset group
    peak and VmHWM."""
    install_child(monkeypatch, InProcessChild(group=True))
    strategy = last_word_strategies.ResetsGroupPeak
    monkeypatch.setattr(strategy, "rise", 0)
    code, run = _run(invoke, tmp_path, "ResetsGroupPeak", isolated=False)
    assert code == 0, run["verdict"]
    payload = run["payload_bytes"]
    assert strategy.rise >= 1.9 * payload, (strategy.rise, payload)  # the transient was there
    offload = next(p for c in run["cycles"] for p in c["phases"] if p["phase"] == "offload")
    # within the thresholds' spacing (half a payload here) and the kernel's 128-page batches
    floor = strategy.rise - payload // 2 - 2**20
    seen = offload["host"]["group_peak"] - offload["host"]["group_before"]
    assert seen >= floor, (seen / 2**20, strategy.rise / 2**20)
    assert run["summary"]["host_peak_bytes"] >= floor, run["summary"]["host_peak_bytes"]
    assert 0.9 <= run["summary"]["steady_host_x"] <= 1.1
    assert offload["cgroup"]["peak_read_by"] == "parent"


def test_a_record_rewritten_at_exit_with_exit_status_0_is_still_corrupted(invoke, tmp_path):
    """Before: ``ok``, exit 0: the atexit hook's record and ``os._exit(0)`` were believed."""
    code, run = _run(invoke, tmp_path, "ErasesItsCorruption", isolated=True)
    assert code == 1, run["verdict"]
    assert run["outcome"]["kind"] == "corrupted", run["verdict"]
    assert any("param_data" in line for line in run["integrity"]), run["integrity"]
    assert "rewritten" in run["outcome"]["detail"], run["outcome"]["detail"]
