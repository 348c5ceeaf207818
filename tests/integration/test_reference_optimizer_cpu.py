"""The reference check covers optimizer state, in CPU emulation (issue 35, point 7).

GIVEN an optimizer strategy that moves the state honestly and whose step hook sets one
``exp_avg_sq`` element to +inf where the batch does not reach (Adam's update there is
``0 / inf = 0``: no parameter and no loss changes, every round trip is exact),
WHEN ``offloadprobe run`` measures it with the no-offload reference (in this process, the
smallest real model, one cycle),
THEN the reference check finds the moment by its bytes and names the non-finite value: the
run is ``corrupted``, exit 1.
"""

from __future__ import annotations

import json

from offloadprobe.cli import main
from tests.conftest import TINY_MODEL

SPEC = "tests.integration.diverging_optimizer:InfMomentWhereTheBatchDoesNotReach"


def test_a_moment_set_to_inf_where_the_batch_does_not_reach_fails(tmp_path, capsys):
    out = tmp_path / "run.json"
    args = ["--strategy", "pageable", "--optimizer-strategy", SPEC, "--json", str(out)]
    try:
        main(["run", "--device", "cpu", "--no-progress", "--cycles", "1", *TINY_MODEL, *args])
        code = 0
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    err = capsys.readouterr().err
    run = json.loads(out.read_text())["runs"][0]
    assert code == 1, err
    assert run["outcome"]["kind"] == "corrupted", run["outcome"]
    (line,) = run["integrity"]
    assert line.startswith(
        "train step after the last load: optimizer exp_avg_sq differs from the no-offload "
        "run's in 1 tensor(s): param "
    ), line
    # the strategy set exactly one element: the truth
    assert line.endswith("; it holds 1 non-finite value (+inf, -inf or NaN)"), line
    # what the checks before saw: the same loss, the same parameters, exact round trips
    assert "loss" not in line and "parameters differ" not in line
    assert "before offload" not in line
