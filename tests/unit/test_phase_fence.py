"""The phase fence's abort: one line on stderr, the rank's own error file, and the end of
the process (a rank that fails inside a collective phase must not leave its peers
waiting). No process group is needed for it."""

from __future__ import annotations

import pytest

from offloadprobe.core.outcomes import Failure
from offloadprobe.engine.world import fence as fence_module
from offloadprobe.engine.world.fence import PhaseFence


class _Exited(Exception):
    pass


def test_abort_leaves_the_rank_failure_for_the_launcher(monkeypatch, capsys):
    said = []

    def exit_now(code: int) -> None:
        raise _Exited(code)

    monkeypatch.setattr(fence_module.os, "_exit", exit_now)
    fence = PhaseFence(None, leader=False, node_cgroup=False, on_abort=said.append)
    failure = Failure(kind="out of memory", message="CUDA out of memory", cycle=1, phase="train")
    with pytest.raises(_Exited) as ended:
        fence.abort(failure)
    assert ended.value.args == (1,)
    assert said == [failure]
    assert capsys.readouterr().err.strip() == (
        "offloadprobe: error: CUDA out of memory (cycle 1, phase train)"
    )
