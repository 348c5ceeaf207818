"""The fingerprint on a GPU (marker ``cuda``; skipped without CUDA).

GIVEN bytes on the GPU and a copy of them on the host,
WHEN both are fingerprinted (the fused Triton kernel on the device, numpy on the host),
THEN the values agree bit for bit, at any size, dtype and byte offset; the kernel's value
is the torch-ops fallback's; structured corruptions are caught on the device; and a run
on CUDA whose strategy corrupts the state in such a pattern, or rebinds
``buffer.param_data``, fails as corrupted.
"""

from __future__ import annotations

import json

import pytest
import torch

from offloadprobe.engine.model import fingerprint as fp
from tests.conftest import TINY_MODEL

pytestmark = pytest.mark.cuda

MiB_WORDS = 1 << 17
CASES = [
    (1, torch.bfloat16),
    (1001, torch.int16),
    (4 * 4096 * 3 + 7, torch.bfloat16),
    (5 * MiB_WORDS + 3, torch.float32),
    (2 * fp.DEVICE_STEP + 123, torch.float32),  # more than two staging passes when unaligned
    (MiB_WORDS // 2 + 1, torch.uint8),
]


def _random(numel: int, dtype: torch.dtype) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(numel)
    nbytes = numel * dtype.itemsize
    words = torch.randint(
        -(1 << 62), 1 << 62, ((nbytes + 7) // 8,), generator=gen, dtype=torch.int64, device="cuda"
    )
    return words.view(torch.uint8)[:nbytes].view(dtype)


@pytest.mark.parametrize(("numel", "dtype"), CASES)
def test_host_and_device_fingerprints_of_the_same_bytes_agree(numel, dtype):
    key = fp.FingerprintKey()
    device = _random(numel, dtype)
    for host in (device.cpu(), device.to("cpu", non_blocking=True)):  # pageable and pinned
        torch.cuda.synchronize()
        assert fp.fingerprint(host, key) == fp.fingerprint(device, key)
    offset = device[3:]  # a view at an odd byte offset: staged on the device
    assert fp.fingerprint(offset.cpu(), key) == fp.fingerprint(offset, key)


def test_the_fused_kernel_is_the_torch_ops_fallback():
    from offloadprobe.engine.model import fingerprint_triton as kernel

    assert fp.backend(torch.device("cuda")) == "triton"
    key = fp.FingerprintKey()
    words = _random(3 * kernel.TILE + 5, torch.int64)
    for first in (0, 12_345, 1 << 40):
        got = int(kernel.keyed_sum(words, first, key.on(words.device)))
        assert got == int(fp.torch_sum(words, first, key))


def _sign_bits(buf: torch.Tensor) -> None:
    words = buf.view(torch.int64)
    words[10] ^= -(1 << 63)
    words[5000] ^= -(1 << 63)


def _every_fourth_bf16(buf: torch.Tensor) -> None:
    buf.view(torch.int16)[3::4] ^= -(1 << 15)


def _every_odd_fp32(buf: torch.Tensor) -> None:
    buf.view(torch.int32)[1::2] ^= -(1 << 31)


@pytest.mark.parametrize("change", [_sign_bits, _every_fourth_bf16, _every_odd_fp32])
def test_structured_corruptions_are_caught_on_the_device(change):
    key = fp.FingerprintKey()
    buf = _random(1 << 20, torch.bfloat16)
    base = fp.fingerprint(buf, key)
    change(buf)
    assert fp.fingerprint(buf, key) != base
    change(buf)  # each is its own inverse
    assert fp.fingerprint(buf, key) == base


BAD = "tests.integration.corrupting_strategies:"
PAGEABLE = ["--strategy", "tests.integration.adversarial_strategies:Pageable"]
RUNS = {
    "two sign bits": (
        ["--strategy", BAD + "TwoSignBits", "--no-reference-check"],
        "param_data differs from before offload",
    ),
    "odd master_param negated": (
        [
            *PAGEABLE,
            "--precision-aware",
            "--no-reference-check",
            "--optimizer-strategy",
            BAD + "EveryOddMasterParamNegated",
        ],
        "optimizer master_param differs from before offload",
    ),
    "two unread rows, reference on": (
        ["--strategy", BAD + "TwoUnreadRowsNegated"],
        "param_data differs from before offload",
    ),
    "param_data rebound": (
        ["--strategy", BAD + "RebindsParamData", "--no-reference-check"],
        "parameters in param_data are not where the buffer puts them",
    ),
}
COMMON = ["run", "--device", "cuda", "--no-progress", "--cycles", "1", *TINY_MODEL]


@pytest.mark.parametrize("case", list(RUNS))
def test_a_corrupting_strategy_fails_a_cuda_run(invoke, tmp_path, case):
    args, line = RUNS[case]
    out = tmp_path / "run.json"
    result = invoke(*COMMON, *args, "--json", str(out))
    torch.cuda.empty_cache()
    assert result.exit_code == 1, result.stderr
    outcome = json.loads(out.read_text())["runs"][0]["outcome"]
    assert outcome["kind"] == "corrupted" and line in outcome["detail"], outcome
