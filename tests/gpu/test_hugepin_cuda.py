"""``hugepin`` and ``relock`` on a real GPU (marker ``cuda``; skipped without CUDA).

Each strategy in its own process, as a user runs it, with its stage timings written
(``--strategy-option stages=PATH``); one in-process round trip on CUDA tensors checks the
registration itself. Invariants with margins; exact equality only for byte counts the
strategy adds up itself (the bytes it passed to ``cudaHostRegister``).
"""

import json
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.cuda

MODEL = ["--layers", "2", "--payload", "600MiB", "--seq-length", "64"]
STRATEGIES = ("hugepin", "relock")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from tests.conftest import run_cli

    tmp = tmp_path_factory.mktemp("hugepin")
    found = {}
    for strategy in STRATEGIES:
        out, stages = tmp / f"{strategy}.json", tmp / f"{strategy}-stages.json"
        proc = run_cli(
            "run",
            "--strategy",
            strategy,
            "--device",
            "cuda",
            "--cycles",
            "3",
            "--no-reference-check",
            "--no-progress",
            "--json",
            str(out),
            *MODEL,
            "--strategy-option",
            f"stages={stages}",
        )
        assert proc.returncode == 0, proc.stderr + proc.stdout
        found[strategy] = (json.loads(out.read_text())["runs"][0], json.loads(stages.read_text()))
    return found


def _phases(run, name):
    return [p for c in run["cycles"] for p in c["phases"] if p["phase"] == name]


def _held_after_loads(run):
    """Host bytes over the baseline at the end of each train phase after the first load,
    on the baseline's scale (the worker's cgroup, page cache out, where it has one: the
    process's RSS also counts some 0.42 GiB of file-backed library pages)."""
    return [
        (
            p["host"]["group_after"]
            if p["host"].get("group_after") is not None
            else p["host"]["rss_after"]
        )
        - run["baseline_host_bytes"]
        for p in _phases(run, "train")
        if p["cycle"] >= 1
    ]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_round_trip_bit_exact_on_cuda(runs, strategy):
    run, _ = runs[strategy]
    assert run["verdict"] == "ok" and run["summary"]["integrity_ok"]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_registered_bytes_are_the_moved_bytes(runs, strategy):
    run, stages = runs[strategy]
    summary = run["summary"]
    torch_pinned = _phases(run, "offload")[-1]["pinned"]["reserved_after"]
    registered = summary["pinned_reserved_bytes"] - torch_pinned
    assert summary["params"]["moved_bytes"] == run["payload_bytes"]
    # exactly the payload, or (where CUPTI records the registrations) the payload and the
    # CUDA runtime's own page-locked buffers (4.5 MiB on the H200)
    assert run["payload_bytes"] <= registered <= run["payload_bytes"] + 8 * 2**20
    offloads = [s for s in stages["stages"] if s["phase"] == "offload"]
    assert offloads[0]["locked_bytes"] == run["payload_bytes"]
    later = [s["locked_bytes"] for s in offloads[1:]]
    assert later == ([run["payload_bytes"]] * 2 if strategy == "relock" else [0, 0])


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_first_offload_rate_and_exact_host(runs, strategy):
    run, _ = runs[strategy]
    summary = run["summary"]
    assert summary["first_offload_gbps"] and summary["first_offload_gbps"] > 0
    assert all(p["gbps"] for p in _phases(run, "offload"))  # every cycle's rate recorded
    assert summary["params"]["host_peak_x"] <= 1.05  # exact mapping: no power-of-two rounding


def test_hugepin_keeps_the_payload_and_relock_hands_it_back(runs):
    (pin, _), (relock, _) = runs["hugepin"], runs["relock"]
    assert all(h >= 0.95 * pin["payload_bytes"] for h in _held_after_loads(pin))
    held = _held_after_loads(relock)
    shmem = [p["host"]["shmem_after"] for p in _phases(relock, "train")]
    assert all(h <= 0.05 * relock["payload_bytes"] for h in held), (held, shmem)


def _mincore_tells_residency():
    """Whether ``mincore`` here tells touched from released pages (a sandbox may not)."""
    from offloadprobe.engine import hostmem

    m = hostmem.map_exact(2**21, huge=False)
    try:
        before = hostmem.resident_bytes(m.address, m.length)
        hostmem.touch(m.address, m.length, "memset")
        touched = hostmem.resident_bytes(m.address, m.length)
        hostmem.release(m.address, m.length)
        return before == 0 and touched == m.length
    finally:
        hostmem.unmap(m)


@pytest.mark.parametrize("ephemeral", [False, True])
def test_chunks_are_registered_and_copied_in_process(ephemeral):
    import torch

    from offloadprobe.engine import hostmem
    from offloadprobe.engine.hugepin_pipeline import HugePinStrategy, Settings
    from offloadprobe.engine.runtime import Runtime

    numel = 3 * 2**25 + 5  # 192 MiB of bf16 and a short last chunk
    param = torch.randn(numel, device="cuda").to(torch.bfloat16)
    buffer = SimpleNamespace(param_data=param, grad_data=torch.ones(numel, device="cuda"))
    models = [SimpleNamespace(buffers=[buffer], expert_parallel_buffers=[])]
    original = param.clone()
    tells = _mincore_tells_residency()
    runtime = Runtime(device="cuda", emulated=False, note=None)
    strategy = HugePinStrategy(
        runtime, ephemeral=ephemeral, settings=Settings(threads=4, chunk_bytes=64 * 2**20)
    )
    try:
        for _ in range(2):
            strategy.offload(models)
            assert param.untyped_storage().nbytes() == 0
            assert strategy.registered_bytes == strategy.locked_bytes == numel * 2
            strategy.load(models)
            assert torch.equal(buffer.param_data, original)
            assert not buffer.grad_data.any()
            (copy,) = strategy.copies.values()
            if tells:  # else the run-level test reads RSS instead
                resident = hostmem.resident_bytes(copy.mapping.address, copy.mapping.length)
                assert resident == (0 if ephemeral else copy.mapping.length)
            assert strategy.locked_bytes == (0 if ephemeral else numel * 2)
    finally:
        strategy.close()
    assert strategy.locked_bytes == 0
