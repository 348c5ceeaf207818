"""Model parts outside the DDP buffers (``--ref-model``, ``--frozen-fraction``): strategies
receive them in the chunk list after the DDP chunks; the built-in ones move every part
bit for bit, code that moves only the DDP buffers leaves the parts on the device (not
offloaded, exit 1), and a part that comes back changed is corrupted. In process, CPU
emulation, the smallest tiny model: verdicts and bytes, not host magnitudes."""

from __future__ import annotations

import json

import pytest

from tests.conftest import TINY

SMALLEST = [*TINY, "--hidden", "128", "--vocab", "512"]
PARTS = ["--ref-model", "--frozen-fraction", "0.5", "--no-progress"]
HERE = "tests.integration.parts_functions:"


def _run(invoke, tmp_path, *args: str):
    out = tmp_path / "run.json"
    result = invoke("run", *SMALLEST, *PARTS, *args, "--json", str(out))
    (run,) = json.loads(out.read_text())["runs"]
    return result, run


@pytest.mark.parametrize("strategy", ["lazy", "registered"])
def test_built_in_strategies_move_every_part_bit_for_bit(invoke, tmp_path, strategy):
    args = ("--strategy", strategy, "--optimizer-strategy", "complete", "--reference-check")
    result, run = _run(invoke, tmp_path, *args)
    assert result.exit_code == 0, result.stdout
    assert run["outcome"]["kind"] == "ok" and not run["integrity"]
    parts = run["part_bytes"]
    # about half the policy frozen (whole parameters, so a little more), and a reference
    # model as large as the policy
    policy = run["payload_bytes"] + parts["frozen"]
    assert 0.5 <= parts["frozen"] / policy < 0.75, parts
    assert parts["ref_model"] == policy
    (fact,) = run["residency"]
    assert fact["parts_to_move"] == parts
    assert not any(fact["left_by_owner"].get(p) for p in parts)
    table = " ".join(result.stdout.split())
    assert "frozen params " in table and "ref model " in table


def test_code_that_moves_only_ddp_buffers_leaves_the_parts(invoke, tmp_path):
    pair = HERE + "offload_ddp_buffers,load_ddp_buffers"
    result, run = _run(invoke, tmp_path, "--strategy", pair)
    assert result.exit_code == 1, result.stdout
    assert run["outcome"]["kind"] == "not offloaded", run["verdict"]
    (fact,) = run["residency"]
    parts = run["part_bytes"]
    assert {p: fact["left_by_owner"][p] for p in parts} == parts
    assert fact["param_bytes_left"] == 0  # the DDP buffers did move
    assert any(r.startswith("frozen parameters ") for r in run["not_offloaded"])
    assert any(r.startswith("reference model ") for r in run["not_offloaded"])


def test_a_reference_model_changed_on_the_way_back_is_corrupted(invoke, tmp_path):
    result, run = _run(invoke, tmp_path, "--strategy", HERE + "FlipsReferenceBit")
    assert result.exit_code == 1
    assert run["outcome"]["kind"] == "corrupted"
    assert "ref_model " in run["verdict"] and "differs from before offload" in run["verdict"]
