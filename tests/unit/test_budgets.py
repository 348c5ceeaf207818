import pytest

from offloadprobe.core.budgets import (
    GpuResidualBudget,
    budgets_from_flags,
    check_all,
    parse_bandwidth,
    parse_host_peak,
)
from offloadprobe.core.errors import UsageError
from offloadprobe.core.records import RunRecord, RunSummary

GiB = 2**30


def run(strategy="naive", *, peak_x=2.61, gpu_left=None, offload=10.0):
    summary = RunSummary(
        host_peak_bytes=int(peak_x * GiB), host_peak_x=peak_x, steady_host_bytes=GiB,
        steady_host_x=1.0, pinned_reserved_bytes=None, gpu_left_after_offload_bytes=gpu_left,
        offload_gbps=offload, load_gbps=offload, first_offload_gbps=1.0, first_load_gbps=1.0,
        integrity_ok=True,
    )  # fmt: skip
    return RunRecord(
        strategy=strategy, description="", payload_bytes=GiB, grad_bytes=2 * GiB,
        baseline_host_bytes=0, gpu_baseline_bytes=None, phases=[], summary=summary,
    )  # fmt: skip


def test_host_peak_ratio_message():
    (breach,) = check_all([parse_host_peak("1.1x")], [run(peak_x=2.61), run("lazy", peak_x=1.0)])
    assert breach.line() == "naive: --max-host-peak: host peak 2.61x payload > limit 1.10x"


def test_host_peak_absolute():
    (breach,) = check_all([parse_host_peak("2GiB")], [run(peak_x=2.5)])
    assert "host peak 2.50 GiB > limit 2.00 GiB" in breach.message


def test_gpu_residual_and_bandwidth():
    budgets = budgets_from_flags(None, "1GiB", "20")
    breaches = check_all(budgets, [run(gpu_left=3 * GiB, offload=5.0)])
    assert [b.budget for b in breaches] == ["--max-gpu-residual", "--min-offload-bandwidth"]
    assert breaches[1].message == "offload 5.0 GB/s < limit 20.0 GB/s"


def test_budgets_that_hold():
    budgets = budgets_from_flags("3x", "0", "1GB/s")
    assert GpuResidualBudget(0) in budgets
    assert check_all(budgets, [run(peak_x=2.0, gpu_left=0, offload=2.0)]) == []


@pytest.mark.parametrize("text", ["1.1", "abc", "x1.1", "-2x"])
def test_bad_host_peak(text):
    with pytest.raises(UsageError, match="--max-host-peak"):
        parse_host_peak(text)


def test_bad_bandwidth():
    with pytest.raises(UsageError, match="--min-offload-bandwidth"):
        parse_bandwidth("fast")
