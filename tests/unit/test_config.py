import pytest

from offloadprobe.core.config import ModelConfig, RunConfig, size_for_payload
from offloadprobe.core.errors import UsageError


def test_heads_must_divide_hidden():
    with pytest.raises(UsageError, match="does not divide --hidden"):
        ModelConfig(hidden_size=1000, num_attention_heads=16)


@pytest.mark.parametrize("cycles", [0, -1])
def test_cycles_must_be_positive(cycles):
    with pytest.raises(UsageError, match="--cycles"):
        RunConfig(model=ModelConfig(), cycles=cycles)


def test_device_must_be_known():
    with pytest.raises(UsageError, match="--device"):
        RunConfig(model=ModelConfig(), device="tpu")


@pytest.mark.parametrize("payload", [48 * 2**20, 512 * 2**20, 5 * 2**30, 8 * 2**30 - 2**26])
def test_size_for_payload_lands_within_two_percent(payload):
    cfg = size_for_payload(ModelConfig(num_layers=4), payload)
    assert cfg.hidden_size % cfg.num_attention_heads == 0
    assert abs(cfg.param_count * 2 - payload) / payload < 0.02


# gpt_param_count and probe_payload are checked against real megatron-core builds in
# tests/integration/test_run_cpu.py (test_payload_is_what_megatron_allocates).
