"""`offloadprobe run` on CPU, in this process: real strategies on real megatron-core buffers.

Host magnitudes use a 16 MiB payload: CPU emulation pins glibc's mmap threshold at
128 KiB, so every host copy of a buffer is a mapping of its own and RSS moves by its exact
size; they are asserted as invariants with margins. Wiring (JSON, output, integrity, user
strategies) uses the smallest model that still builds megatron's objects.
"""

import json

import pytest

from tests.conftest import TINY_MODEL

# no train steps: host figures only
MAGNITUDE = [
    "--layers",
    "1",
    "--payload",
    "16MiB",
    "--seq-length",
    "32",
    "--micro-batch",
    "1",
    "--train-steps",
    "0",
    "--no-reference-check",
    "--cycles",
    "2",
]

SUMMARY_KEYS = {
    "host_peak_bytes",
    "host_peak_x",
    "steady_host_bytes",
    "steady_host_x",
    "pinned_reserved_bytes",
    "gpu_left_after_offload_bytes",
    "offload_gbps",
    "load_gbps",
    "integrity_ok",
}


def _run(invoke, tmp_path, *args):
    out = tmp_path / f"report-{len(list(tmp_path.iterdir()))}.json"
    result = invoke("run", "--device", "cpu", "--no-progress", "--json", str(out), *args)
    doc = json.loads(out.read_text()) if out.exists() else None
    return result, doc


def _summary(reports, strategy):
    return reports[strategy]["runs"][0]["summary"]


@pytest.fixture(scope="module")
def magnitudes(tmp_path_factory):
    """Per built-in strategy: its JSON report on a 16 MiB payload, two cycles."""
    from tests.conftest import invoke_cli

    tmp = tmp_path_factory.mktemp("magnitudes")
    found = {}
    for strategy in ("naive", "lazy", "registered", "pageable"):
        result, doc = _run(invoke_cli, tmp, "--strategy", strategy, *MAGNITUDE)
        assert result.exit_code == 0, result.stderr + result.stdout
        found[strategy] = doc
    return found


@pytest.fixture(scope="module")
def lazy_tiny(tmp_path_factory):
    """lazy on the tiny model with the no-offload reference check, as users run it."""
    from tests.conftest import invoke_cli

    result, doc = _run(
        invoke_cli,
        tmp_path_factory.mktemp("tiny"),
        "--strategy",
        "lazy",
        "--cycles",
        "2",
        *TINY_MODEL,
    )
    assert result.exit_code == 0, result.stderr + result.stdout
    return result, doc


def test_json_schema_is_stable(lazy_tiny):
    from offloadprobe.schemas import validate

    _, doc = lazy_tiny
    validate(doc, "run")  # the shipped JSON Schema
    assert doc["schema_version"] >= 3
    assert doc["device"] == "cpu" and doc["emulated"] is True
    assert doc["payload_bytes"] == doc["runs"][0]["payload_bytes"] > 0
    assert {"torch", "megatron_core", "cuda"} <= set(doc["versions"])
    assert doc["settings"]["cycles"] == 2 and doc["settings"]["reference_check"] is True
    (run,) = doc["runs"]
    assert run["strategy"] == "lazy" and run["label"] == "lazy + none"
    assert run["verdict"] == "ok" and run["outcome"]["kind"] == "ok"
    assert set(run["summary"]) >= SUMMARY_KEYS
    assert [c["cycle"] for c in run["cycles"]] == [0, 1]
    assert [p["phase"] for p in run["cycles"][0]["phases"]] == ["train", "offload", "load"]
    assert run["integrity"] == [] and run["summary"]["integrity_ok"]


def test_payload_is_what_megatron_allocates(magnitudes, lazy_tiny):
    # the arithmetic (param count, DDP layout) against real megatron-core DDP buffers
    from offloadprobe.core.config import ModelConfig
    from offloadprobe.plan.probe import probe_payload

    _, tiny = lazy_tiny
    for doc in (tiny, magnitudes["lazy"]):
        model = ModelConfig(**doc["model"])
        assert probe_payload(model) == doc["payload_bytes"]
        # bf16: two bytes per parameter, plus at most a little DDP padding
        assert 0 <= doc["payload_bytes"] - 2 * model.param_count < 2**16
    # --payload 16MiB sizes the model to within 2 % of it
    assert magnitudes["lazy"]["payload_bytes"] == pytest.approx(16 * 2**20, rel=0.02)


def test_output_says_what_is_emulated_and_checked(lazy_tiny):
    result, _ = lazy_tiny
    assert "CPU emulation" in result.stdout and "no pinned memory" in result.stdout
    assert "compared bit for bit with a no-offload run" in result.stdout
    assert result.stdout.startswith("lazy + none: ok")


def test_naive_host_peak_clearly_above_lazy(magnitudes):
    naive, lazy = (_summary(magnitudes, s) for s in ("naive", "lazy"))
    # naive holds the previous copy while building the next (and, in emulation, the
    # .cpu() temporary): about 3x payload by the second cycle; lazy reuses one copy: 1x.
    assert naive["host_peak_x"] >= 1.8
    assert 0.9 <= lazy["host_peak_x"] <= 1.5
    assert naive["host_peak_x"] >= lazy["host_peak_x"] + 0.6


@pytest.mark.parametrize("strategy", ["naive", "lazy", "registered", "pageable"])
def test_projected_host_peak_within_5_percent(magnitudes, strategy):
    # offloadprobe plan's CPU-emulation model predicts what run measured, from the
    # model's shape alone (benchmarks/projection_validation.py does this on the H200)
    from offloadprobe.core.config import ModelConfig
    from offloadprobe.plan.probe import project_probe

    model = ModelConfig(**magnitudes[strategy]["model"])
    predicted = project_probe(model, strategy, emulated=True, cycles=2)
    measured = _summary(magnitudes, strategy)["host_peak_bytes"]
    assert measured == pytest.approx(predicted, rel=0.05)


def test_reused_exact_copies_hold_about_one_payload(magnitudes):
    for strategy in ("lazy", "registered", "pageable"):
        s = _summary(magnitudes, strategy)
        assert 0.9 <= s["steady_host_x"] <= 1.3, (strategy, s)


def test_every_built_in_round_trip_is_bit_exact(magnitudes):
    for strategy, doc in magnitudes.items():
        assert doc["runs"][0]["summary"]["integrity_ok"] is True, strategy
        assert doc["runs"][0]["integrity"] == [], strategy


def test_user_strategy_is_plugged_in(invoke, tmp_path):
    spec = "tests.integration.user_strategies:keep_on_host"
    result, doc = _run(invoke, tmp_path, "--strategy", spec, "--cycles", "1", *TINY_MODEL)
    assert result.exit_code == 0, result.stderr + result.stdout
    run = doc["runs"][0]
    assert run["summary"]["integrity_ok"] and run["integrity"] == []
    assert run["strategy"] == spec
    assert f"user strategy {spec}" == run["description"]


def test_corrupting_strategy_fails_loudly(invoke, tmp_path):
    spec = "tests.integration.user_strategies:FlipsOneBit"
    result, doc = _run(invoke, tmp_path, "--strategy", spec, "--cycles", "1", *TINY_MODEL)
    assert result.exit_code == 1
    assert len(result.error_lines) == 1
    assert "user_strategies:FlipsOneBit + none: corrupted: " in result.stderr
    assert "param_data differs" in result.stderr
    assert result.stdout.startswith(
        "tests.integration.user_strategies:FlipsOneBit + none: corrupted"
    )
    assert doc["runs"][0]["summary"]["integrity_ok"] is False  # the JSON is written all the same
