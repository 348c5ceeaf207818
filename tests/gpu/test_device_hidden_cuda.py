"""On the GPU: device memory no part owns fails the run, whoever allocated it (PyTorch's
allocator or CuPy's), and pinned memory is counted whoever page-locked it (CUPTI's
records: CuPy's ``cudaHostAlloc``, a strategy's own ``cudaHostRegister``).

The truth each figure is checked against: the payload the strategy copied (it holds one
copy, exactly the DDP buffers' bytes), and the driver's own count of device memory."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.integration import device_stash_strategies as stash

pytestmark = pytest.mark.cuda

MiB = 2**20
STASH = "tests.integration.device_stash_strategies:"
OUTSIDE = "tests.gpu.outside_allocator_strategies:"
RUN = ["run", "--device", "cuda", "--layers", "1", "--payload", "16MiB", "--cycles", "2"]
RUN += ["--no-reference-check", "--no-progress"]
RUNTIME = 8 * MiB
"""The CUDA runtime's own page-locked buffers CUPTI records (4.5 MiB seen on the H200)."""
HAS_CUPY = importlib.util.find_spec("cupy") is not None
HAS_CUPTI = importlib.util.find_spec("cupti") is not None


def _run(cli, tmp_path, *args: str):
    out = tmp_path / "run.json"
    proc = cli(*RUN, *args, "--json", str(out))
    assert out.exists(), proc.stderr
    return proc, json.loads(out.read_text())["runs"][0]


@pytest.mark.parametrize(
    "name", ["StashInAttribute", "StashInModuleCache", "StashInAutogradGraph", "StashAsStorage"]
)
def test_a_device_tensor_no_part_owns_fails_on_cuda(cli, tmp_path, name):
    proc, run = _run(cli, tmp_path, "--strategy", STASH + name)
    assert proc.returncode == 1, proc.stderr
    assert run["outcome"]["kind"] == "not offloaded", run["verdict"]
    fact = run["residency"][-1]
    hidden = sum(fact["unreferenced"].values()) + fact["unattributed_bytes"]
    keep = stash._Honest.keep_bytes
    assert keep <= hidden <= keep + 4 * MiB, fact  # allocator rounding, train's crumbs


@pytest.mark.skipif(not HAS_CUPY, reason="CuPy not installed")
def test_parameters_stashed_in_cupy_device_memory_fail(cli, tmp_path):
    proc, run = _run(cli, tmp_path, "--strategy", OUTSIDE + "CupyDeviceStash")
    assert proc.returncode == 1, proc.stderr
    fact = run["residency"][-1]
    payload = run["payload_bytes"]
    # outside PyTorch's allocator: the driver's count beyond PyTorch's reserved bytes
    assert 0.95 * payload <= fact["unattributed_bytes"] <= 1.2 * payload, fact
    assert 0.95 * payload <= fact["outside_allocator_bytes"] <= 1.2 * payload, fact
    assert "no part owns" in run["outcome"]["detail"], run["verdict"]


def test_the_fix_on_cuda_leaves_nothing_hidden(cli, tmp_path):
    proc, run = _run(cli, tmp_path, "--strategy", "lazy")
    assert proc.returncode == 0, proc.stderr
    for fact in run["residency"]:
        assert (
            sum(fact["unreferenced"].values()) + fact["unattributed_bytes"]
            < fact["allowance_bytes"]
        ), fact
    s = run["summary"]
    if HAS_CUPTI:  # by fact: PyTorch's own pinned blocks (power-of-two rounded), and the
        # CUDA runtime's own page-locked buffers (4.5 MiB per process seen on the H200)
        assert s["pinned_source"] == "cupti"
        last = [p for c in run["cycles"] for p in c["phases"] if p["phase"] == "offload"][-1]
        reserved = last["pinned"]["reserved_after"]
        assert reserved <= last["pinned"]["locked_after"] <= reserved + RUNTIME, last["pinned"]


@pytest.mark.skipif(not HAS_CUPTI, reason="cupti-python not installed")
@pytest.mark.parametrize("name", ["CupyPinned", "OwnHostRegister"])
def test_pinned_memory_outside_pytorch_is_counted(cli, tmp_path, name):
    if name == "CupyPinned" and not HAS_CUPY:
        pytest.skip("CuPy not installed")
    proc, run = _run(cli, tmp_path, "--strategy", OUTSIDE + name)
    assert proc.returncode == 0, proc.stderr
    s = run["summary"]
    payload = run["payload_bytes"]
    assert s["pinned_source"] == "cupti"
    # one page-locked copy of the payload (CuPy rounds its pinned blocks up a little),
    # and the CUDA runtime's own page-locked buffers
    assert payload <= s["pinned_recorded_bytes"] <= 1.1 * payload + RUNTIME, s
    assert s["pinned_reserved_bytes"] >= s["pinned_recorded_bytes"]
    assert "page-locked by any allocator, CUPTI" in proc.stdout
