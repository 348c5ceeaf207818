"""Device ownership by bytes, and every cycle judged (issue 35, points 1 and 2), in CPU
emulation against strategies written to read "ok" where a tensor hangs decides.

GIVEN a strategy that keeps the parameters' bytes on the device where the old rules read
them as something else (optimizer state, memory within the staging allowance, a release
the reference model paid for, a budget's business), or that is wrong only in its first
cycle,
WHEN ``offloadprobe run`` measures it,
THEN the run fails with exit 1, naming where the bytes hang; before the change each of
these read "ok" (exit 0).

The truth each test holds the record to is the strategy's own: the bytes it copied, the
cycle it was wrong in. Parameter strategies run untrained (``--train-steps 0``).
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import with_flags
from tests.integration import ownership_strategies as own

MiB = 2**20
OWN = "tests.integration.ownership_strategies:"
RUN = ["run", "--device", "cpu", "--layers", "1", "--payload", "4MiB", "--cycles", "1"]
RUN += ["--train-steps", "0", "--no-reference-check", "--no-progress"]


def _run(invoke, tmp_path, *args: str, **flags: str):
    out = tmp_path / "run.json"
    result = invoke(*with_flags(RUN, **flags), *args, "--json", str(out))
    return result, json.loads(out.read_text())["runs"][0]


def _copies(fact: dict) -> int:
    return sum(fact["param_copies"].values())


def test_a_copy_hung_on_the_optimizer_is_the_parameters(invoke, tmp_path):
    """(a) 0.24 P in a main parameter's ``decoupled_grad`` (read as optimizer state kept by
    design before) and 0.24 P as a plain attribute of another (within the staging
    allowance before): by content, both are the parameters', each named."""
    result, run = _run(invoke, tmp_path, "--strategy", OWN + "CopiesOnTheOptimizer")
    assert result.exit_code == 1, result.stdout
    assert run["outcome"]["kind"] == "not offloaded", run["verdict"]
    (line,) = run["not_offloaded"]
    assert line.startswith("param_data ") and "by content" in line, line
    hung = "main_param.decoupled_grad (hung on the optimizer, not its own)"
    assert hung in line and "stash on a main parameter" in line, line
    copied = own.CopiesOnTheOptimizer.share * run["payload_bytes"]
    found = run["residency"][0]["param_copies"]
    assert set(found) == {hung, "stash on a main parameter"}, found
    assert all(0.98 * copied <= n <= 1.02 * copied for n in found.values()), found
    # it was never the optimizer's: the optimizer's own state is its fp32 shards alone
    fact = run["residency"][0]
    assert "main_param.decoupled_grad" not in fact["left_by_owner"], fact
    assert fact["optimizer_state_bytes"] == fact["left_by_owner"]["shard_fp32_from_float16_groups"]


@pytest.mark.parametrize(
    ("name", "flags", "says"),
    [
        pytest.param(
            "KeepsHalfFreesTheParts",
            ["--ref-model", "--frozen-fraction", "0.5"],
            "by content: a copy in KeepsHalfFreesTheParts.kept[0]",
            id="half-kept-by-content",
        ),
        pytest.param(
            "KeepsAnEncodedCopyFreesTheParts",
            ["--ref-model"],
            "the parts outside param_data gave",
            id="encoded-copy-part-by-part",
        ),
    ],
)
def test_freeing_the_parts_does_not_pay_for_parameters_kept(invoke, tmp_path, name, flags, says):
    """(b) Half of param_data kept as bytes, or all of it encoded (no content search finds
    it), while the reference model and the frozen parameters are freed: their release is
    theirs, never the parameters'."""
    result, run = _run(invoke, tmp_path, "--strategy", OWN + name, *flags)
    assert result.exit_code == 1, result.stdout
    assert run["outcome"]["kind"] == "not offloaded", run["verdict"]
    assert any(says in line for line in run["not_offloaded"]), run["not_offloaded"]
    fact = run["residency"][0]
    assert fact["parts_to_move"] and not any(
        fact["left_by_owner"].get(p) for p in fact["parts_to_move"]
    )
    if name == "KeepsHalfFreesTheParts":
        param_data = fact["param_bytes_to_move"]
        assert 0.49 * param_data <= _copies(fact) <= 0.51 * param_data, fact


def test_all_of_a_16mib_payload_in_a_device_buffer_fails_under_a_residual_budget(invoke, tmp_path):
    """(c) From its first load on, the strategy keeps a device copy of every param_data: a
    4 MiB residual budget neither switches the rules off nor misses memory the audit
    never saw made."""
    args = ("--strategy", OWN + "CopiesAtItsFirstLoad", "--max-gpu-residual", "4MiB")
    result, run = _run(invoke, tmp_path, *args, payload="16MiB", cycles="2")
    assert result.exit_code == 1, result.stdout
    assert run["outcome"]["kind"] == "not offloaded", run["verdict"]
    assert "by content" in run["not_offloaded"][0], run["not_offloaded"]
    first, second = run["residency"]
    payload = second["param_bytes_to_move"]
    assert not first["param_copies"] and 0.98 * payload <= _copies(second) <= payload, second
    # the staging allowance serves the parameters: 4 MiB + 16 MiB / 8, no room for a copy
    assert second["allowance_bytes"] == 4 * MiB + payload // 8


def test_a_strategy_wrong_only_in_its_first_cycle_fails(invoke, tmp_path):
    """(d) grad_data kept at the first offload only, under a residual budget it keeps: the
    first cycle is judged as the last is, and the budget does not switch the rule off."""
    args = ("--strategy", OWN + "KeepsGradsInItsFirstCycle", "--max-gpu-residual", "9MiB")
    result, run = _run(invoke, tmp_path, *args, cycles="2")
    assert result.exit_code == 1, result.stdout
    assert run["outcome"]["kind"] == "partly offloaded", run["verdict"]
    assert run["not_offloaded"][0].startswith("grad_data "), run["not_offloaded"]
    first, last = run["residency"]
    grads = 2 * first["param_bytes_to_move"]  # fp32 grads of bf16 parameters
    assert 0.99 * grads <= first["left_by_owner"]["grad_data"] <= 1.01 * grads, first
    assert "grad_data" not in last["left_by_owner"], last
