"""verl-shaped offload functions (``verl_shaped.py``) where verl's own would not fail: a
load before any offload is a no-op (no buffer is restored that was never freed), and a
chunk list holding a reference model (not DDP-wrapped) and frozen parameters moves every
part, bit for bit; and where verl's would fail too (a second offload of the reference
model). In process, CPU emulation, the smallest tiny model: verdicts and bytes, not host
magnitudes."""

from __future__ import annotations

import json

import pytest

from tests.conftest import TINY, with_flags

SMALLEST = [*with_flags(TINY, hidden="128", vocab="512"), "--no-progress"]
MOD = "tests.integration.verl_shaped:"
MODEL_PAIRS = {
    "post-6193": MOD + "offload_megatron_model_to_cpu,load_megatron_model_to_gpu",
    "pre-6193": MOD + "offload_megatron_model_to_cpu_pre6193,load_megatron_model_to_gpu",
}
OPTIMIZER_PAIR = MOD + "offload_megatron_optimizer,load_megatron_optimizer@each"


def _run(invoke, tmp_path, *args: str, isolated: bool = False, **flags: str | bool | None):
    """``run`` on the smallest model, with ``flags`` of it changed (``with_flags``)."""
    out = tmp_path / "run.json"
    command = ("run", *with_flags(SMALLEST, **flags), *args, "--json", str(out))
    result = invoke(*command, isolated=isolated)
    (run,) = json.loads(out.read_text())["runs"]
    return result, run


def test_a_load_before_any_offload_restores_nothing(invoke, tmp_path):
    # one load function for both offload variants
    args = ("--strategy", MODEL_PAIRS["post-6193"], "--sequence", "load-without-offload")
    result, run = _run(invoke, tmp_path, *args, cycles=None)
    assert result.exit_code == 0, result.stderr + result.stdout
    assert run["outcome"]["kind"] == "ok", run["verdict"]
    steps = [(c["cycle"], p) for c in run["cycles"] for p in c["phases"]]
    assert [p["phase"] for _, p in steps] == run["sequence"]
    (_, first_load), (_, load) = [(n, p) for n, p in steps if p["phase"] == "load"]
    # the load at step 2 finds everything on the device: it moves and allocates nothing
    assert first_load["bytes_moved"] == 0 and first_load["device_allocated_bytes"] == 0
    assert load["bytes_moved"] == run["payload_bytes"]  # the load after the offload does


@pytest.mark.parametrize("variant", list(MODEL_PAIRS))
def test_a_reference_model_and_frozen_parameters_move_bit_for_bit(invoke, tmp_path, variant):
    parts = ("--ref-model", "--frozen-fraction", "0.5")
    pairs = ("--strategy", MODEL_PAIRS[variant], "--optimizer-strategy", OPTIMIZER_PAIR)
    # in a real worker, as a user's run is: in this process the frees of the tests before
    # it can put the host below the zero the run takes (once -0.09x of a 2.8 MiB payload)
    result, run = _run(invoke, tmp_path, *pairs, *parts, reference_check=True, isolated=True)
    assert result.exit_code == 0, result.stderr + result.stdout
    assert run["outcome"]["kind"] == "ok" and not run["integrity"], run["verdict"]
    assert set(run["part_bytes"]) == {"frozen", "ref_model"} and all(run["part_bytes"].values())
    (fact,) = run["residency"]
    assert fact["parts_to_move"] == run["part_bytes"]
    assert not any(fact["left_by_owner"].get(p) for p in run["part_bytes"]), fact
    assert fact["param_bytes_left"] == 0
    assert fact["optimizer_moved_bytes"] == fact["optimizer_state_bytes"] > 0


def test_a_second_offload_of_the_reference_model_frees_its_only_copy(invoke, tmp_path):
    """verl's reference-model branch (``.to("cpu")``, then free the old storage when the
    tensor owns all of it) on an offload of what is offloaded: ``.to("cpu")`` of a host
    tensor is that tensor, so the free drops the only copy, and the next load fails (on
    the H200: ``CUDA error: invalid argument`` at step 7, h200-2026-12-01-sequences.json).
    The tool names the step; a strategy that keeps the invariant passes the same run."""
    parts = ("--ref-model", "--frozen-fraction", "0.5", "--sequence", "double-offload")
    post = MODEL_PAIRS["post-6193"]
    result, run = _run(invoke, tmp_path, "--strategy", post, *parts, cycles=None)
    assert result.exit_code == 1, result.stdout
    assert run["outcome"]["kind"] == "crashed", run["verdict"]
    assert "at step 7, load" in run["verdict"], run["verdict"]
    result, run = _run(invoke, tmp_path, "--strategy", "lazy", *parts, cycles=None)
    assert result.exit_code == 0 and run["outcome"]["kind"] == "ok", run["verdict"]
