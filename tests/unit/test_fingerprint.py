"""The round-trip fingerprint has no structured blind spot, and all its paths agree.

GIVEN tensors of random words (bf16, fp32, int16) fingerprinted with a run's key,
WHEN one word changes by one ULP or one bit, words swap at any distance, a range is
permuted, the tensor is zeroed, or a structured pattern changes many words at once (the
sign bits of two words in one block, every k-th bf16 or every odd fp32 element negated,
whole rows negated),
THEN the fingerprint changes; an identical copy keeps it; another key gives another; and
the host path (numpy), the torch-ops path and the definition give the same value at any
size, byte offset, chunk size and thread split.

The structured cases say whether the linear hash before issue 22 (per block
``sum(word * odd key) mod 2**64``, then a finaliser per block) missed them: each that says
so failed when this file was run against it (commit 87075e3).
"""

from __future__ import annotations

import pytest
import torch

from offloadprobe.engine.model import fingerprint as fp
from offloadprobe.engine.model.integrity import FingerprintKey, fingerprint

SEED = b"0123456789abcdef"
KEY = FingerprintKey(SEED)
GEN = torch.Generator().manual_seed(3)
BIG = torch.randn(4096 * 81 * 2, generator=GEN).to(torch.bfloat16)  # 162K words
SMALL32 = torch.randn(100_003, generator=GEN)
ONE_BLOCK_BF16 = torch.randn(1 << 16, generator=GEN).to(torch.bfloat16)  # 16K words
ONE_BLOCK_FP32 = torch.randn(1 << 15, generator=GEN)  # 16K words
SIGN = -(1 << 63)


def _fp(t: torch.Tensor) -> tuple[int, ...]:
    return fingerprint(t, KEY)


BASE_BIG = _fp(BIG)
BASE_32 = _fp(SMALL32)


# ------------------------------------------------------------------ structured patterns


@pytest.mark.parametrize("pair", [(0, 1), (10, 5000), (123, 124), (7, 16_383)])
def test_the_sign_bits_of_two_words_in_one_block_are_caught(pair):
    """Missed by the linear hash: each flip of bit 63 moved its sum by exactly 2**63."""
    out = ONE_BLOCK_BF16.clone()
    words = out.view(torch.int64)
    for index in pair:
        words[index] ^= SIGN
    assert _fp(out) != _fp(ONE_BLOCK_BF16)


def test_any_even_number_of_sign_bits_is_caught():
    """Missed by the linear hash, for every draw: an even number of 2**63 is 0."""
    g = torch.Generator().manual_seed(21)
    base = _fp(ONE_BLOCK_BF16)
    for count in (2, 4, 6, 100, 1000):
        out = ONE_BLOCK_BF16.clone()
        picked = torch.randperm(out.numel() // 4, generator=g)[:count]
        out.view(torch.int64)[picked] ^= SIGN
        assert _fp(out) != base, count


@pytest.mark.parametrize("k", [4, 8, 16])
def test_every_kth_bf16_weight_negated_is_caught(k):
    """Missed by the linear hash: elements k-1, 2k-1, ... are the top bf16 of their word,
    so each negation is a flip of bit 63, an even number of them in the block."""
    out = ONE_BLOCK_BF16.clone()
    out[k - 1 :: k] = -out[k - 1 :: k]
    assert _fp(out) != _fp(ONE_BLOCK_BF16)


@pytest.mark.parametrize("state", ["exp_avg", "master_param"])
def test_every_odd_fp32_element_negated_is_caught(state):
    """Missed by the linear hash: an odd fp32 is the high half of its word (bit 63)."""
    base = ONE_BLOCK_FP32 if state == "master_param" else ONE_BLOCK_FP32 * 1e-3
    out = base.clone()
    out[1::2] = -out[1::2]
    assert _fp(out) != _fp(base)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_two_rows_negated_are_caught(dtype):
    """The rows the adversary negated (embedding rows no batch reads). The linear hash
    caught this pattern too (whole rows change the low lanes as well); kept as a case."""
    rows = (torch.randn(1024, 128, generator=GEN) * 0.02).to(dtype)
    out = rows.clone()
    out[[5, 900]] = -out[[5, 900]]
    assert _fp(out) != _fp(rows)


# ------------------------------------------------------------------ single changes and moves


def _swapped(t: torch.Tensor, i: int, j: int) -> torch.Tensor:
    out = t.clone()
    out[i], out[j] = t[j], t[i]
    return out


def _first_differing(t: torch.Tensor, i: int, distance: int) -> int:
    """Smallest index >= i whose element differs bitwise from the one ``distance`` later."""
    words = t.view(torch.int16)
    while words[i] == words[i + distance]:
        i += 1
    return i


@pytest.mark.parametrize("distance", [1, 2, 3, 4, 5, 7, 8, 4096, 16_384, 65_521, 65_521 * 2])
def test_a_swap_at_any_distance_is_caught(distance):
    i = _first_differing(BIG, 12_345, distance)
    assert _fp(_swapped(BIG, i, i + distance)) != BASE_BIG


@pytest.mark.parametrize("kind", ["roll", "reverse", "halves swapped", "shuffle"])
def test_permutations_are_caught(kind):
    out = BIG.clone()
    if kind == "roll":
        out = torch.roll(BIG, 1)
    elif kind == "reverse":
        out[1000:2000] = BIG[1000:2000].flip(0)
    elif kind == "halves swapped":
        n = BIG.numel() // 2
        out[:n], out[n:] = BIG[n:], BIG[:n]
    else:
        perm = torch.randperm(4096, generator=torch.Generator().manual_seed(5))
        out[:4096] = BIG[:4096][perm]
    assert _fp(out) != BASE_BIG


@pytest.mark.parametrize("index", [0, 1, 65_520, BIG.numel() // 2, BIG.numel() - 1])
def test_a_flipped_sign_bit_is_caught(index):
    out = BIG.clone()
    out.view(torch.int16)[index] ^= -0x8000  # bit 15: the sign of a bf16
    assert _fp(out) != BASE_BIG


@pytest.mark.parametrize("tensor", ["bf16", "fp32"])
def test_one_ulp_in_any_element_is_caught(tensor):
    base, want = (BIG, BASE_BIG) if tensor == "bf16" else (SMALL32, BASE_32)
    g = torch.Generator().manual_seed(17)
    word = torch.int16 if tensor == "bf16" else torch.int32
    for index in [*torch.randint(0, base.numel(), (10,), generator=g).tolist(), base.numel() - 1]:
        out = base.clone()
        out.view(word)[index] += 1
        assert _fp(out) != want, index


def test_zeroed_state_is_caught():
    assert _fp(torch.zeros_like(SMALL32)) != BASE_32


def test_identical_bytes_keep_the_fingerprint_and_other_keys_differ():
    assert _fp(SMALL32.clone()) == BASE_32
    assert fingerprint(SMALL32, FingerprintKey(b"fedcba9876543210")) != BASE_32
    assert fingerprint(SMALL32, FingerprintKey()) != fingerprint(SMALL32, FingerprintKey())


def test_dtype_and_shape_are_part_of_the_fingerprint():
    assert _fp(SMALL32[:100].view(torch.int32)) != _fp(SMALL32[:100])
    assert _fp(SMALL32[:100].view(10, 10)) != _fp(SMALL32[:100])


def test_the_key_does_not_show_itself():
    assert "secret" in repr(KEY) and str(KEY._k1) not in repr(KEY)


# ------------------------------------------------------------------ every path, one value


def _definition(raw: torch.Tensor, key: FingerprintKey) -> int:
    data = bytes(raw.tolist())
    data += b"\0" * (-len(data) % 8)
    words = [int.from_bytes(data[i : i + 8], "little") for i in range(0, len(data), 8)]
    return sum(key.mix(w, i) for i, w in enumerate(words)) & fp.MASK


@pytest.mark.parametrize("size", [1, 7, 8, 9, 63, 64, 65, 8 * 200 + 3])
@pytest.mark.parametrize("offset", [0, 3, 8])
def test_host_and_torch_paths_are_the_definition(size, offset, monkeypatch):
    # small chunks and passes, so that boundaries, tails and staged copies all occur
    monkeypatch.setattr(fp, "DEVICE_STEP", 16)
    key = FingerprintKey(SEED, chunk=64)
    raw = torch.randint(0, 256, (size + offset,), generator=GEN, dtype=torch.uint8)[offset:]
    want = _definition(raw, key)
    assert fp._host_total(raw, key) == want
    assert int(fp._device_total(raw, key)) & fp.MASK == want  # torch ops, on the CPU


def test_the_chunk_size_and_thread_split_do_not_change_the_value(monkeypatch):
    words = torch.randint(-(1 << 62), 1 << 62, (10_000 * 8 + 5,), generator=GEN)
    one = fingerprint(words, FingerprintKey(SEED, chunk=1 << 16))
    assert fingerprint(words, FingerprintKey(SEED, chunk=100)) == one
    monkeypatch.setattr(fp, "HOST_WORDS_PER_THREAD", 1000)
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        assert fingerprint(words, FingerprintKey(SEED, chunk=256)) == one
    finally:
        torch.set_num_threads(threads)


def test_a_batch_is_the_tensors_one_by_one():
    tensors = [BIG, SMALL32, torch.zeros(0), SMALL32[3:]]
    assert fp.fingerprints(tensors, KEY) == [_fp(t) for t in tensors]


def test_fingerprinting_leaves_the_storage_resizable():
    # strategies free and restore param_data's storage after it has been fingerprinted
    t = SMALL32.clone()
    _fp(t)
    t.untyped_storage().resize_(0)
    t.untyped_storage().resize_(SMALL32.numel() * 4)


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
    argv = ["fingerprint_cost.py", "--size", "2MiB", "--device", "cpu", "--repeats", "1"]
    monkeypatch.setattr(sys, "argv", [*argv, "--out", str(out)])
    module.main()
    doc = json.loads(out.read_text())
    assert doc["versions"]["torch"] and doc["benchmark"] == "fingerprint_cost"
    result = doc["result"]
    assert result["backend"] == "numpy" and result["host_equals_device"]
    assert result["caught"] and all(result["caught"].values()), result["caught"]
    assert result["fingerprint_s"] > 0 and result["pinned_h2d_s"] > 0
