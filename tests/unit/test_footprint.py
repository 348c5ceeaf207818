"""The host-memory estimate made before a run, and the refusal when it cannot fit."""

import pytest

from offloadprobe.core.config import ModelConfig, OptimizerChoice, size_for_payload
from offloadprobe.core.errors import UsageError
from offloadprobe.plan.footprint import estimate

MiB, GiB = 2**20, 2**30


def _model(payload: int) -> ModelConfig:
    return size_for_payload(ModelConfig(), payload)


def _estimate(payload, strategy="lazy", optimizer_strategy="none", device="cpu"):
    return estimate(
        _model(payload),
        strategy=strategy,
        optimizer_strategy=optimizer_strategy,
        optimizer=OptimizerChoice(),
        device=device,
    )


@pytest.mark.parametrize(
    ("payload", "strategy", "optimizer_strategy", "measured"),
    [
        (32 * MiB, "lazy", "none", 1355536 * 1024),
        (128 * MiB, "lazy", "none", 2482920 * 1024),
        (128 * MiB, "naive", "none", 2506144 * 1024),
        (64 * MiB, "naive", "none", 1869052 * 1024),
        (64 * MiB, "lazy", "complete", 2215956 * 1024),
    ],
)
def test_estimate_covers_measured_peaks_within_15_percent(
    payload, strategy, optimizer_strategy, measured
):
    """VmHWM of ``run --device cpu --cycles 2`` measured on the 2-core machine (2026-11-30)."""
    total = _estimate(payload, strategy, optimizer_strategy).total_bytes
    assert measured <= total <= 1.15 * measured


def test_cpu_counts_the_emulated_device_cuda_does_not():
    cpu, cuda = _estimate(1 * GiB), _estimate(1 * GiB, device="cuda")
    assert cpu.total_bytes > 10 * GiB > cuda.total_bytes
    assert any(t.label == "emulated device" for t in cpu.terms)
    assert not any(t.label == "emulated device" for t in cuda.terms)


def test_largest_payload_that_fits_inverts_the_estimate():
    five = _estimate(5 * GiB)
    largest = five.largest_payload(8 * GiB, device="cpu")
    assert _estimate(largest).total_bytes == pytest.approx(8 * GiB, rel=0.05)


def test_check_fits_refuses_with_the_estimate_and_the_way_out(monkeypatch):
    from offloadprobe.cli import fit

    monkeypatch.setattr(fit, "available_host_bytes", lambda: (9 * GiB, "cgroup limit 9.00 GiB"))
    with pytest.raises(UsageError) as err:
        fit.check_fits(
            _model(5 * GiB),
            strategies=[("naive", "none"), ("lazy", "none")],
            optimizer=OptimizerChoice(),
            device="cpu",
            force=False,
        )
    message = str(err.value)
    assert message.startswith("this run needs about 6") and "cgroup limit 9.00 GiB" in message
    assert "emulated device 45.00 GiB" in message and "--force" in message
    forced = fit.check_fits(
        _model(5 * GiB),
        strategies=[("lazy", "none")],
        optimizer=OptimizerChoice(),
        device="cpu",
        force=True,
    )
    assert forced.total_bytes > 9 * GiB
