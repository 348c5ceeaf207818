"""The round-trip fingerprint has no structured blind spot.

GIVEN a tensor of random words (bf16, fp32, int8 ...) fingerprinted with a run's key,
WHEN any one word changes by one ULP or one bit, two words at any distance swap, a
range is permuted or the tensor is zeroed,
THEN the fingerprint changes; an identical copy keeps it; another run's key gives another.
"""

from __future__ import annotations

import pytest
import torch

from offloadprobe.engine.model.integrity import FingerprintKey, fingerprint

BLOCK = 1 << 12
"""Words per keyed block in these tests (the product uses 2**20): small, so distances
within a block, across blocks and at exactly a block's period are all cheap to test."""
KEY = FingerprintKey(b"0123456789abcdef", block=BLOCK)
GEN = torch.Generator().manual_seed(3)
# 40.5 keyed blocks of bf16 (4 elements per 64-bit word)
BIG = torch.randn(BLOCK * 4 * 81 // 2, generator=GEN).to(torch.bfloat16)
SMALL32 = torch.randn(100_003, generator=GEN)


def _fp(t: torch.Tensor) -> tuple[int, ...]:
    return fingerprint(t, KEY)


BASE_BIG = _fp(BIG)
BASE_32 = _fp(SMALL32)


def _swapped(t: torch.Tensor, i: int, j: int) -> torch.Tensor:
    out = t.clone()
    out[i], out[j] = t[j], t[i]
    word = torch.int16 if t.element_size() == 2 else torch.int32
    assert not torch.equal(out.view(word), t.view(word))
    return out


def _first_differing(t: torch.Tensor, i: int, distance: int) -> int:
    """Smallest index >= i whose element differs bitwise from the one ``distance`` later."""
    words = t.view(torch.int16)
    while words[i] == words[i + distance]:
        i += 1
    return i


@pytest.mark.parametrize(
    "distance", [1, 2, 3, 4, 5, 7, 8, 4 * BLOCK, 4 * BLOCK + 1, 8 * BLOCK, 65_521, 65_521 * 2]
)
def test_a_swap_at_any_distance_is_caught(distance):
    i = _first_differing(BIG, 12_345, distance)
    assert _fp(_swapped(BIG, i, i + distance)) != BASE_BIG


def test_random_swaps_are_caught():
    g = torch.Generator().manual_seed(11)
    for _ in range(20):
        i, j = torch.randint(0, BIG.numel(), (2,), generator=g).tolist()
        if BIG.view(torch.int16)[i] == BIG.view(torch.int16)[j]:
            continue
        assert _fp(_swapped(BIG, i, j)) != BASE_BIG


@pytest.mark.parametrize("kind", ["roll", "reverse", "blocks swapped", "shuffle"])
def test_permutations_are_caught(kind):
    out = BIG.clone()
    if kind == "roll":
        out = torch.roll(BIG, 1)
    elif kind == "reverse":
        out[1000:2000] = BIG[1000:2000].flip(0)
    elif kind == "blocks swapped":
        n = 4 * BLOCK
        out[:n], out[n : 2 * n] = BIG[n : 2 * n], BIG[:n]
    else:
        perm = torch.randperm(4096, generator=torch.Generator().manual_seed(5))
        out[:4096] = BIG[:4096][perm]
    assert _fp(out) != BASE_BIG


@pytest.mark.parametrize("index", [0, 1, 65_520, 4 * BLOCK - 1, 4 * BLOCK, BIG.numel() - 1])
def test_a_flipped_sign_bit_is_caught(index):
    out = BIG.clone()
    out.view(torch.int16)[index] ^= -0x8000  # bit 15: the sign of a bf16
    assert _fp(out) != BASE_BIG


@pytest.mark.parametrize("tensor", ["bf16", "fp32"])
def test_one_ulp_in_any_element_is_caught(tensor):
    base, want = (BIG, BASE_BIG) if tensor == "bf16" else (SMALL32, BASE_32)
    g = torch.Generator().manual_seed(17)
    for index in [*torch.randint(0, base.numel(), (10,), generator=g).tolist(), base.numel() - 1]:
        out = base.clone()
        out[index] = torch.nextafter(base[index : index + 1].float(), torch.tensor(float("inf")))
        if tensor == "bf16":  # nextafter in fp32 then rounding may not move a bf16: step the word
            out.view(torch.int16)[index] = base.view(torch.int16)[index] + 1
        assert _fp(out) != want, index


def test_zeroed_state_is_caught():
    assert _fp(torch.zeros_like(SMALL32)) != BASE_32


def test_identical_bytes_keep_the_fingerprint_and_other_keys_differ():
    assert _fp(SMALL32.clone()) == BASE_32
    assert fingerprint(SMALL32, FingerprintKey(b"fedcba9876543210", block=BLOCK)) != BASE_32


def test_the_product_block_size_catches_a_swap_one_period_apart():
    key = FingerprintKey(b"0123456789abcdef")  # 2**20 words per block, as runs use
    data = torch.randn(4 * key.block * 2 + 8, generator=GEN).to(torch.bfloat16)
    i = _first_differing(data, 3, 4 * key.block)
    assert fingerprint(_swapped(data, i, i + 4 * key.block), key) != fingerprint(data, key)


def test_unaligned_views_and_odd_sizes_are_fingerprinted():
    raw = torch.arange(1001, dtype=torch.int16)
    view = raw[3:]  # storage offset of 6 bytes: not a whole 64-bit word
    base = _fp(view)
    changed = view.clone()
    changed[-1] += 1
    assert _fp(changed) != base
    assert _fp(view.clone()) == base


def test_fingerprint_cost_benchmark_runs_and_checks_on_cpu(tmp_path, monkeypatch):
    # the H200 script, smoke-run on the CPU with a small buffer (its main, in this process)
    import importlib.util
    import json
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location(
        "fingerprint_cost", root / "benchmarks" / "fingerprint_cost.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "fp.json"
    monkeypatch.setattr(sys, "argv", ["fingerprint_cost.py", "--size", "4MiB", "--device", "cpu",
                                      "--repeats", "1", "--out", str(out)])  # fmt: skip
    module.main()
    doc = json.loads(out.read_text())
    assert doc["versions"]["torch"] and doc["benchmark"] == "fingerprint_cost"
    result = doc["result"]
    assert result["one_ulp_caught"] and result["swap_65521_apart_caught"]
    assert result["fingerprint_s"] > 0 and result["pinned_h2d_s"] > 0


@pytest.mark.parametrize(
    "words", [1, 7, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK, 3 * BLOCK + 5, 40 * BLOCK + 123]
)
def test_the_host_sum_is_the_device_sum_bit_for_bit(words):
    # CPU runs take the int64 mv/dot path; CUDA the element-wise one: same value, always
    from offloadprobe.engine.model.integrity import _keyed_sum_device, _keyed_sum_host

    data = torch.randint(-(1 << 62), 1 << 62, (words + 3,), generator=GEN, dtype=torch.int64)
    for view in (data[:words], data[3:]):  # offsets and odd ends
        host = _keyed_sum_host(view, KEY.multipliers, KEY)
        device = _keyed_sum_device(view, KEY.multipliers, KEY, torch.device("cpu"))
        assert host == device
