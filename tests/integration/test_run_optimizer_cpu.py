"""`offloadprobe run` with optimizer-state strategies: the residency audit through the CLI."""

import pytest

from tests.conftest import SMALL_MODEL

MODEL_KEYS = {"param_data", "grad_data"}


def _optimizer_left(run):
    left = run["summary"]["left_after_offload_bytes_by_key"]
    return {k: v for k, v in left.items() if k not in MODEL_KEYS and v}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from tests.conftest import run_each

    specs = ("legacy", "fixed", "complete",
             "tests.integration.user_optimizer_offload:VerlOffloadPreFix")  # fmt: skip
    found = {}
    for spec in specs:
        ((doc, stdout),) = run_each(
            tmp_path_factory.mktemp("opt"),
            ["lazy"],
            "--device",
            "cpu",
            "--precision-aware",
            "--optimizer-strategy",
            spec,
            "--cycles",
            "2",
            *SMALL_MODEL,
        ).values()
        found[spec] = (doc["runs"][0], stdout)
    return found


def test_legacy_leaves_master_param_behind(runs):
    run, stdout = runs["legacy"]
    left = _optimizer_left(run)
    assert set(left) == {"master_param"}
    # 4 bytes of fp32 master per parameter; the bf16 payload is 2 bytes per parameter
    assert left["master_param"] == pytest.approx(2 * run["payload_bytes"], rel=0.02)
    entries = [e for e in run["left_after_offload"] if e["owner"] == "master_param"]
    assert entries and all(e["dtype"] == "float32" and e["param_name"] for e in entries)
    assert "legacy left on the device: master_param" in " ".join(stdout.split())


@pytest.mark.parametrize("spec", ["fixed", "complete"])
def test_fixed_and_complete_leave_nothing(runs, spec):
    run, _ = runs[spec]
    assert _optimizer_left(run) == {}
    assert run["summary"]["integrity_ok"]


def test_user_pre_fix_function_is_audited_like_legacy(runs):
    run, _ = runs["tests.integration.user_optimizer_offload:VerlOffloadPreFix"]
    assert set(_optimizer_left(run)) == {"master_param"}


def test_output_names_the_optimizer_and_the_reference_check(runs):
    for run, stdout in runs.values():
        assert "PrecisionAwareAdam" in run["optimizer"]
        assert "optimizer: offloadprobe PrecisionAwareAdam" in stdout
        assert "compared bit for bit with a no-offload run" in stdout
        assert run["integrity"] == []


def test_host_holds_what_was_moved(runs):
    legacy, fixed = runs["legacy"][0]["summary"], runs["fixed"][0]["summary"]
    # fixed also moved the 4 B/param master: about 2 payloads more host memory
    extra = fixed["steady_host_bytes"] - legacy["steady_host_bytes"]
    assert extra == pytest.approx(2 * runs["fixed"][0]["payload_bytes"], rel=0.05)
    assert fixed["optimizer_state_bytes"] > 0


def test_unknown_optimizer_strategy_is_bad_input(cli):
    proc = cli("run", "--optimizer-strategy", "legasy")
    assert proc.returncode == 2
    assert "choose one of legacy, fixed, complete, none" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
