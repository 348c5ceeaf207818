"""A real ``torch.OutOfMemoryError`` in a phase is a verdict, not a traceback, and the
parameter and optimizer moves are separate parts on CUDA (marker ``cuda``)."""

import json

import pytest

pytestmark = pytest.mark.cuda

MODEL = ["--layers", "2", "--payload", "256MiB", "--seq-length", "64", "--cycles", "2"]


def test_device_oom_in_a_phase_is_a_verdict_with_json(cli, tmp_path):
    out = tmp_path / "oom.json"
    # 300 MiB of device memory cannot hold 256 MiB of bf16 params plus fp32 grads
    proc = cli(
        "run",
        "--device",
        "cuda",
        "--no-progress",
        "--gpu-limit",
        "300MiB",
        "--no-reference-check",
        *MODEL,
        "--json",
        str(out),
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    outcome = json.loads(out.read_text())["runs"][0]["outcome"]
    assert outcome["kind"] == "out of memory" and outcome["phase"] in ("setup", "train")
    assert "out of memory" in proc.stderr.splitlines()[-1]


def test_parts_on_cuda_each_over_their_own_bytes(cli, tmp_path):
    out = tmp_path / "parts.json"
    proc = cli(
        "run",
        "--device",
        "cuda",
        "--no-progress",
        "--strategy",
        "registered",
        "--optimizer-strategy",
        "complete",
        "--precision-aware",
        *MODEL,
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    s = json.loads(out.read_text())["runs"][0]["summary"]
    assert 0.95 <= s["params"]["host_peak_x"] <= 1.2
    assert 0.95 <= s["optimizer"]["host_peak_x"] <= 2.1  # pinned rounding up to 2x
    assert s["moved_bytes"] == s["params"]["moved_bytes"] + s["optimizer"]["moved_bytes"]


@pytest.mark.parametrize(
    ("spec", "code"),
    [
        ("KeepsADeviceCopy", 1),
        ("PreallocatedDeviceCopy", 1),
        ("PaysWithOptimizerState", 1),
        ("KeepsAStagingBuffer", 0),
    ],
)
def test_a_copy_kept_on_the_device_is_no_offload_on_cuda(cli, tmp_path, spec, code):
    # torch.cat of param_data, a buffer made at construction, or a copy paid for with
    # optimizer state: each keeps the parameters on the GPU; a staging buffer kept for
    # reuse does not
    out = tmp_path / "keeps.json"
    proc = cli(
        "run",
        "--device",
        "cuda",
        "--no-progress",
        "--no-reference-check",
        *MODEL,
        "--strategy",
        f"tests.integration.adversarial_strategies:{spec}",
        "--json",
        str(out),
    )
    assert proc.returncode == code, proc.stderr
    if code:
        assert "param_data freed, but the device gave back" in proc.stderr
