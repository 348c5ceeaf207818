"""Device memory no part of the model or the optimizer owns, left after an offload, is a
"not offloaded" verdict with its bytes and when it was made; a staging buffer within the
allowance is not; optimizer state a strategy forgot is "partly offloaded" by key.

CPU emulation: the emulated device's own total is the ledger's truth (on a GPU, the
allocator's and the driver's: ``tests/gpu/test_device_hidden_cuda.py``).
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import with_flags
from tests.integration import device_stash_strategies as stash

MiB = 2**20
STASH = "tests.integration.device_stash_strategies:"
RUN = [
    "run",
    "--device",
    "cpu",
    "--layers",
    "1",
    "--payload",
    "16MiB",
    "--cycles",
    "1",
    "--no-reference-check",
    "--no-progress",
]
UNTRAINED = ["--train-steps", "0"]
"""For parameter strategies whose lie is in their moves: no train step (most of a run's CPU);
where the ledger would see train-step leftovers, or optimizer state is needed, they train."""
STATE = {"payload": "4MiB"}
"""For verdicts on optimizer state: the audit's bytes by key are exact at any size."""


def _run(invoke, tmp_path, *args: str, isolated: bool = False, **flags: str):
    """``RUN`` with ``flags`` of it changed (``with_flags``) and ``args`` added."""
    out = tmp_path / "run.json"
    result = invoke(*with_flags(RUN, **flags), *args, "--json", str(out), isolated=isolated)
    return result, json.loads(out.read_text())["runs"][0]


@pytest.mark.parametrize(
    ("name", "when"),
    [
        ("StashInAttribute", "made during the offloads and loads"),
        ("StashInModuleCache", "made during the offloads and loads"),
        ("StashInAutogradGraph", "made during the offloads and loads"),
        ("StashAsStorage", "made during the offloads and loads"),
    ],
)
def test_a_device_tensor_no_part_owns_is_not_offloaded(invoke, tmp_path, name, when):
    result, run = _run(invoke, tmp_path, "--strategy", STASH + name, *UNTRAINED)
    assert result.exit_code == 1, result.stdout
    assert run["outcome"]["kind"] == "not offloaded", run["verdict"]
    fact = run["residency"][-1]
    held = fact["unreferenced"][when]
    assert stash._Honest.keep_bytes <= held <= stash._Honest.keep_bytes + MiB, held
    assert "no part owns" in run["outcome"]["detail"]
    stash.CACHE.clear()


def test_a_small_staging_buffer_is_within_the_allowance(invoke, tmp_path):
    result, run = _run(invoke, tmp_path, "--strategy", STASH + "SmallStagingBuffer", *UNTRAINED)
    assert run["outcome"]["kind"] == "ok", run["verdict"]
    assert result.exit_code == 0, result.stdout
    fact = run["residency"][-1]
    assert fact["unreferenced"]["made during the offloads and loads"] >= MiB
    assert fact["allowance_bytes"] >= 4 * MiB


def test_the_fix_leaves_nothing_hidden(invoke, tmp_path):
    result, run = _run(invoke, tmp_path, "--strategy", "lazy")
    assert result.exit_code == 0, result.stdout
    for fact in run["residency"]:
        hidden = sum(fact["unreferenced"].values()) + fact["unattributed_bytes"]
        assert hidden < fact["allowance_bytes"], fact


def test_master_param_left_is_partly_offloaded_by_default(invoke, tmp_path):
    """verl #6635's seed bug: moving exp_avg/exp_avg_sq only leaves master_param."""
    args = ("--optimizer-strategy", "legacy", "--precision-aware")
    result, run = _run(invoke, tmp_path, *args, **STATE)
    assert result.exit_code == 1, result.stdout
    assert run["outcome"]["kind"] == "partly offloaded", run["verdict"]
    assert run["not_offloaded"][0].startswith("master_param ")
    left = run["residency"][-1]["left_by_owner"]["master_param"]
    assert left > 0


def test_a_gpu_residual_budget_does_not_allow_what_a_rule_fails(invoke, tmp_path):
    """A budget only adds to the rules: ``--max-gpu-residual 1GiB`` holds the residual,
    and the master weights legacy leaves are still ``partly offloaded`` (exit 1)."""
    result, run = _run(
        invoke,
        tmp_path,
        "--optimizer-strategy",
        "legacy",
        "--precision-aware",
        "--max-gpu-residual",
        "1GiB",
        **STATE,
    )
    assert run["outcome"]["kind"] == "partly offloaded", run["verdict"]
    assert run["not_offloaded"][0].startswith("master_param ")
    assert result.exit_code == 1, result.stdout


GROWN = "tests.integration.grown_storage_strategies:"
GROWN_MODEL = {"payload": "8MiB", "cycles": "2"}
"""The hidden copy is the payload: 8 MiB is still 3 MiB over the staging allowance (4 MiB +
an eighth); cycle 0 offloads honestly and grows the storage at its load: the lie is in
cycle 1."""


@pytest.mark.parametrize(
    ("name", "how"),
    [
        ("GrowModuleTensor", "made before the first train step"),
        ("GrowOptimizerState", "grown beyond the tensors that own them"),
    ],
)
def test_a_copy_in_a_storage_grown_under_its_tensors_is_not_offloaded(invoke, tmp_path, name, how):
    """A one-byte tensor the strategy module made at import, or an exp_avg's storage the
    audit knows, grown to hold the parameters: bit-exact, yet nothing left the device."""
    # the module's import-time tensor needs the worker's device: a worker of its own
    isolated = name == "GrowModuleTensor"
    # an exp_avg exists only after a train step
    steps = [] if name == "GrowOptimizerState" else UNTRAINED
    args = ("--strategy", GROWN + name, *steps)
    result, run = _run(invoke, tmp_path, *args, isolated=isolated, **GROWN_MODEL)
    assert result.exit_code == 1, result.stdout
    assert run["outcome"]["kind"] == "not offloaded", run["verdict"]
    held = run["residency"][-1]["unreferenced"][how]
    assert held >= 0.95 * run["payload_bytes"], run["residency"][-1]


def test_parameters_parked_in_grad_data_are_not_offloaded(invoke, tmp_path):
    # the first offload already parks them: one cycle shows it. Their bytes are found by
    # content in grad_data: a copy is the parameters' wherever it hangs
    result, run = _run(invoke, tmp_path, "--strategy", GROWN + "ParkInGradData", *UNTRAINED)
    assert result.exit_code == 1, result.stdout
    assert run["outcome"]["kind"] == "not offloaded", run["verdict"]
    assert run["not_offloaded"][0].startswith("param_data ")
    assert "a copy in grad_data" in run["not_offloaded"][0]
    fact = run["residency"][-1]
    assert fact["param_copies"]["grad_data"] >= 0.98 * run["payload_bytes"], fact
