"""verl-shaped functions plugged in as they are, through the CLI, on CPU (in this process)."""

import json

MOD = "tests.integration.verl_shaped"
TINY = [
    "--layers",
    "1",
    "--hidden",
    "256",
    "--vocab",
    "1024",
    "--seq-length",
    "32",
    "--micro-batch",
    "1",
    "--cycles",
    "2",
    "--no-progress",
    "--device",
    "cpu",
]


def test_verl_shaped_pairs_run_without_a_wrapper(invoke, tmp_path):
    out = tmp_path / "run.json"
    result = invoke(
        "run",
        "--precision-aware",
        "--json",
        str(out),
        *TINY,
        "--strategy",
        f"{MOD}:offload_megatron_model_to_cpu,load_megatron_model_to_gpu",
        "--optimizer-strategy",
        f"{MOD}:offload_megatron_optimizer,load_megatron_optimizer@each",
    )
    assert result.exit_code == 0, result.stderr + result.stdout
    run = json.loads(out.read_text())["runs"][0]
    left = {k: v for k, v in run["summary"]["left_after_offload_bytes_by_key"].items() if v}
    assert left == {}  # post-6193 params and post-6635 optimizer state: all moved
    assert run["summary"]["integrity_ok"]
    assert run["strategy"].endswith(",load_megatron_model_to_gpu")


def test_single_object_functions_given_the_list_fail_loudly(invoke):
    # without @each verl's optimizer functions get [optimizer] and cannot use it
    result = invoke(
        "run",
        *TINY,
        "--no-reference-check",
        "--optimizer-strategy",
        f"{MOD}:offload_megatron_optimizer,load_megatron_optimizer",
    )
    assert result.exit_code == 1
    assert "AttributeError" in result.stderr
    assert result.error_lines[-1].startswith("offloadprobe: error: ")
