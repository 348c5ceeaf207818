"""The phase fence's abort: one line on stderr, the rank's own error file, and the end of
the process (a rank that fails inside a collective phase must not leave its peers
waiting). No process group is needed for it."""

from __future__ import annotations

import json

import pytest

from offloadprobe.core.errors import ERROR_FILE_ENV
from offloadprobe.engine.world import fence as fence_module
from offloadprobe.engine.world.fence import PhaseFence


class _Exited(Exception):
    pass


def test_abort_leaves_the_rank_failure_for_the_launcher(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(ERROR_FILE_ENV, str(tmp_path / "error.json"))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")

    def exit_now(code: int) -> None:
        raise _Exited(code)

    monkeypatch.setattr(fence_module.os, "_exit", exit_now)
    fence = PhaseFence(None, leader=False, node_cgroup=False)
    with pytest.raises(_Exited) as ended:
        fence.abort("out of memory", "CUDA out of memory (cycle 1, phase train)")
    assert ended.value.args == (1,)
    said = json.loads((tmp_path / "error.json.rank1").read_text())
    assert said == {"kind": "out of memory", "message": "CUDA out of memory (cycle 1, phase train)"}
    assert capsys.readouterr().err.strip() == (
        "offloadprobe: error: CUDA out of memory (cycle 1, phase train)"
    )
