"""``run --sequence``, measured by the runner through the CLI (in process, tiny model):
a strategy that breaks on a second offload in a row is corrupted at that step with exit
1, the fix passes the same sequence, and a sequence that cannot run is bad input.

Separate from ``test_sequences_cpu.py``: its module-wide runtime must not be open while
the CLI opens its own."""

from __future__ import annotations

import json

import pytest

from offloadprobe.core.sequences import PRESETS
from tests.conftest import TINY, with_flags

SMALLEST = with_flags(TINY, hidden="128", vocab="512", cycles=None)
"""TINY at its smallest width, without --cycles (a sequence runs its own steps): what is
tested here is a verdict, not a magnitude."""
CHECKED = with_flags(SMALLEST, reference_check=True)

BREAKS = "tests.integration.sequence_strategies:"


def test_a_second_offload_that_breaks_is_corrupted_at_that_step(invoke, tmp_path):
    """The measured runner: corrupted, the verdict names step 6, exit 1."""
    out = tmp_path / "run.json"
    args = ["--sequence", "double-offload", "--no-progress"]
    result = invoke(
        "run", "--strategy", BREAKS + "FreshCopyEveryOffload", *SMALLEST, *args, "--json", str(out)
    )
    assert result.exit_code == 1, result.stdout
    (run,) = json.loads(out.read_text())["runs"]
    assert run["outcome"]["kind"] == "corrupted"
    assert run["verdict"].startswith(
        "corrupted: after step 6, offload (second in a row) (found by the load at step 7): "
    ), run["verdict"]
    assert run["sequence"] == PRESETS["double-offload"].split(",")
    # the first round trip (steps 2-3) was clean, and every step up to 7 was measured
    assert [c["cycle"] for c in run["cycles"]] == list(range(1, 8))


def test_the_fix_passes_the_same_sequence(invoke, tmp_path):
    out = tmp_path / "run.json"
    args = ["--sequence", "double-offload", "--no-progress"]
    result = invoke("run", "--strategy", "lazy", *CHECKED, *args, "--json", str(out))
    assert result.exit_code == 0, result.stdout
    (run,) = json.loads(out.read_text())["runs"]
    assert run["outcome"]["kind"] == "ok"
    facts = {f["cycle"]: f for f in run["residency"]}
    assert sorted(facts) == [2, 5, 6]  # an audit after every offload step
    assert facts[6]["param_bytes_left"] == 0
    assert "every train step after a load compared" in " ".join(result.stdout.split())


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("train,offload,train,load", "step 3 (train) needs every part on the device"),
        ("train,load,train", "needs an offload and a load after it"),
        ("train,offlaod,load", "'offlaod' is not a step or a preset"),
        ("", "--sequence is empty"),
        ("train,,offload,load", "--sequence: step 2 is empty"),
        ("train,offload,load,", "--sequence: step 4 is empty"),
    ],
)
def test_a_sequence_that_cannot_run_is_bad_input(invoke, text, words):
    result = invoke("run", "--strategy", "lazy", *SMALLEST, "--sequence", text, "--no-progress")
    assert result.exit_code == 2
    assert words in result.stderr


def test_a_checkpoint_step_is_measured_and_its_files_removed(invoke, tmp_path):
    """``checkpoint-between``: each checkpoint writes at least the parameters and the
    optimizer state, its host transient and what stays are said, no file stays, and
    training after it matches the no-offload run."""
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    out = tmp_path / "run.json"
    args = ["--sequence", "checkpoint-between", "--no-progress"]
    env = {"TMPDIR": str(folder)}
    result = invoke("run", "--strategy", "lazy", *CHECKED, *args, "--json", str(out), env=env)
    assert result.exit_code == 0, result.stdout
    (run,) = json.loads(out.read_text())["runs"]
    phases = [p for c in run["cycles"] for p in c["phases"] if p["phase"] == "checkpoint"]
    assert [p["cycle"] for p in phases] == [4, 6]
    state = run["residency"][0]["optimizer_state_bytes"]
    for p in phases:
        assert p["bytes_moved"] >= run["payload_bytes"] + state, p["bytes_moved"]
    assert not list(folder.iterdir())
    flat = " ".join(result.stdout.split())
    assert "checkpoint at step 4: " in flat and " resident after" in flat
