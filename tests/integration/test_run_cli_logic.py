"""`offloadprobe run`'s own logic against a fake runner: flags, exit codes, output.

No model is built here (``fake_runner``); what a strategy really does to memory is
tested on the real runner in test_run_cpu.py.
"""

from __future__ import annotations

import json

import pytest

from tests.fakes import PAYLOAD

MiB = 2**20


def test_a_healthy_run_exits_0_and_writes_the_report(invoke, fake_runner, tmp_path):
    out = tmp_path / "deep" / "r.json"
    result = invoke(
        "run",
        "--strategy",
        "lazy",
        "--device",
        "cpu",
        "--cycles",
        "2",
        "--no-progress",
        "--json",
        str(out),
    )
    assert result.exit_code == 0, result.stderr
    assert result.stderr == f"wrote JSON {out}\n"  # and nothing else: no progress
    doc = json.loads(out.read_text())
    assert doc["schema_version"] >= 3 and doc["device"] == "cpu" and doc["emulated"] is True
    (run,) = doc["runs"]
    assert run["strategy"] == "lazy" and run["summary"]["host_peak_x"] == 1.0
    assert [c["cycle"] for c in run["cycles"]] == [0, 1]
    assert result.stdout.startswith("lazy + none: ok")
    assert "round trip bit-exact" in result.stdout


def test_flags_reach_the_run_configuration(invoke, fake_runner):
    result = invoke(
        "run",
        "--strategy",
        "pageable",
        "--device",
        "cpu",
        "--cycles",
        "4",
        "--train-steps",
        "2",
        "--seed",
        "9",
        "--layers",
        "3",
        "--payload",
        "64MiB",
        "--optimizer-strategy",
        "fixed",
        "--precision-aware",
        "--exp-avg-dtype",
        "bf16",
        "--rollout-claim",
        "1GiB",
        "--gpu-limit",
        "2GiB",
        "--no-reference-check",
        "--no-progress",
    )
    assert result.exit_code == 0, result.stderr
    cfg = fake_runner.last
    assert (cfg.strategy, cfg.cycles, cfg.train_steps, cfg.seed) == ("pageable", 4, 2, 9)
    assert cfg.optimizer_strategy == "fixed" and cfg.reference_check is False
    assert cfg.optimizer.precision_aware and cfg.optimizer.exp_avg_dtype == "bf16"
    assert cfg.rollout_claim_bytes == 2**30 and cfg.gpu_limit_bytes == 2 * 2**30
    assert cfg.model.num_layers == 3
    # --payload sizes the model: within a few percent of 64 MiB of bf16 parameters
    from offloadprobe.plan.probe import probe_payload

    assert probe_payload(cfg.model) == pytest.approx(64 * MiB, rel=0.05)


def test_progress_bar_goes_to_stderr_not_stdout(invoke, fake_runner):
    result = invoke("run", "--device", "cpu", "--cycles", "1")
    assert result.exit_code == 0, result.stderr
    assert "building model" not in result.stdout and "cycle 0 offload" not in result.stdout


def test_budget_breach_is_one_line_and_exit_1(invoke, fake_runner):
    fake_runner.runs["naive"] = dict(host_peak_x=2.1)
    result = invoke(
        "run", "--strategy", "naive", "--device", "cpu", "--no-progress", "--max-host-peak", "1.5x"
    )
    assert result.exit_code == 1
    # the breach is printed once: in the verdict that leads the report; the error line
    # names the row, its verdict and the flag
    assert result.stdout.startswith("naive + none: over budget\nhost peak 2.10x > 1.50x\n")
    assert result.error_lines == [
        "offloadprobe: error: naive + none: over budget (--max-host-peak)"
    ]
    assert (result.stdout + result.stderr).count("2.10x > 1.50x") == 1


@pytest.mark.parametrize(
    ("flags", "peak_x", "code"),
    [
        (["--max-host-peak", "1.5x"], 1.5, 0),  # at the limit is within it
        (["--max-host-peak", "1.5x"], 1.51, 1),
        (["--max-host-peak", f"{int(1.2 * PAYLOAD)}"], 1.0, 2),  # a bare number has no unit
        (["--max-host-peak", "60MiB"], 1.2, 0),  # 57.6 MiB
        (["--max-host-peak", "57MiB"], 1.2, 1),
    ],
)
def test_host_peak_budget_edges(invoke, fake_runner, flags, peak_x, code):
    fake_runner.runs["lazy"] = dict(host_peak_x=peak_x)
    result = invoke("run", "--device", "cpu", "--no-progress", *flags)
    assert result.exit_code == code, result.stderr


def test_nothing_left_behind_meets_a_zero_residual_budget(invoke, fake_runner):
    fake_runner.runs["lazy"] = dict(left_on_device={"param_data": 0, "grad_data": 0})
    result = invoke("run", "--device", "cpu", "--no-progress", "--max-gpu-residual", "0")
    assert result.exit_code == 0, result.stderr


def test_left_behind_bytes_break_the_residual_budget(invoke, fake_runner):
    fake_runner.runs["lazy"] = dict(left_on_device={"param_data": 0, "master_param": 8 * MiB})
    result = invoke(
        "run",
        "--device",
        "cpu",
        "--no-progress",
        "--optimizer-strategy",
        "legacy",
        "--max-gpu-residual",
        "1MiB",
    )
    assert result.exit_code == 1
    assert result.error_lines == [
        "offloadprobe: error: lazy + legacy: over budget (--max-gpu-residual)"
    ]
    assert "left on device (audited, CPU emulation) 8.00 MiB > 1.00 MiB" in result.stdout


def test_a_residual_budget_does_not_turn_partly_offloaded_into_ok(invoke, fake_runner):
    """(issue 35, e) grad_data left after a parameter offload fails the run; a residual
    budget that holds the 2 MiB left only adds to that rule, never replaces it."""
    fake_runner.runs["lazy"] = dict(left_on_device={"param_data": 0, "grad_data": 2 * MiB})
    run = ("run", "--device", "cpu", "--no-progress")
    for budget in ((), ("--max-gpu-residual", "4MiB")):
        result = invoke(*run, *budget)
        assert result.exit_code == 1, (budget, result.stdout)
        assert result.error_lines == [
            "offloadprobe: error: lazy + none: partly offloaded: grad_data 2.00 MiB still on device"
        ], budget


def test_corruption_exits_1_and_says_where(invoke, fake_runner):
    fake_runner.runs["lazy"] = dict(integrity=["cycle 0: param_data differs at byte 14"])
    result = invoke("run", "--device", "cpu", "--no-progress", "--max-host-peak", "9x")
    assert result.exit_code == 1
    assert result.error_lines == [
        "offloadprobe: error: lazy + none: corrupted: cycle 0: param_data differs at byte 14"
    ]
    assert result.stdout.startswith("lazy + none: corrupted")


def test_out_of_memory_exits_1_with_the_phase(invoke, fake_runner):
    fake_runner.runs["naive"] = dict(failure="CUDA out of memory")
    result = invoke("run", "--strategy", "naive", "--device", "cpu", "--no-progress")
    assert result.exit_code == 1
    (line,) = result.error_lines
    assert line.startswith("offloadprobe: error: naive + none: out of memory: CUDA out of memory")
    assert "cycle 0" in line and "offload" in line


def test_unwritable_json_path_is_bad_input(invoke, fake_runner, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = invoke("run", "--device", "cpu", "--no-progress", "--json", str(blocker / "r.json"))
    assert result.exit_code == 2
    assert len(result.error_lines) == 1 and "--json" in result.error_lines[0]
