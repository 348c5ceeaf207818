"""Optimizer state is checked by name, not by position: a strategy that rebuilds each
state dict with its keys in another order, every value bit-exact, is ``ok`` (it was
``corrupted``: "the optimizer's state changed shape ... (68 tensors before, 68 after)").
In process, CPU emulation, the tiny model, one cycle, no reference run."""

from __future__ import annotations

import json

from tests.conftest import TINY

PAIR = "tests.integration.reordering_optimizer:offload_reversed,load_as_offloaded"


def test_state_rebuilt_with_its_keys_reversed_is_ok(invoke, tmp_path):
    out = tmp_path / "run.json"
    args = ("--strategy", "lazy", "--optimizer-strategy", PAIR, "--no-progress")
    result = invoke("run", *TINY, *args, "--json", str(out))
    (run,) = json.loads(out.read_text())["runs"]
    assert run["outcome"]["kind"] == "ok", run["verdict"]
    assert result.exit_code == 0, result.stderr
    assert run["integrity"] == []
    (fact,) = run["residency"]
    assert not fact["left_by_owner"].get("exp_avg")  # it did move the state
