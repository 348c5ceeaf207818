"""The FSDP2 engine through the CLI, in CPU emulation: a gate can trust its verdicts. Every
run here is a fresh process (an in-process worker would leave its heap to the next test).

On 2 real gloo ranks (``--nproc-per-node 2``): a strategy that changes one shard's value
on load is corrupted (exit 1, the shard named by its key), and one that leaves a shard on
the device is not offloaded (exit 1, named by FSDP2's own owner word). In one process,
rank r of N through the fake process group (``--shards``): verl's and the fix's round
trips are bit-exact, the engine's readings are the shard arithmetic's,
and the output says what is not real (every row on real gloo ranks:
test_fsdp2_rows_cpu.py); options of the other engine exit 2 in one line. Strategies an
adversarial review wrote to fool the gate fail it, and a load that takes a device id gets
one. The truth is each strategy's own doing (tests/integration/fsdp2_bad_strategies.py)."""

from __future__ import annotations

import json

import pytest

from offloadprobe.engines.fsdp2.layout import chunk_rows, local_rows
from offloadprobe.engines.fsdp2.presets import ModelShape

BAD = "tests.integration.fsdp2_bad_strategies:"
TINY = ("--engine", "fsdp2", "--layers", "1", "--cycles", "1", "--no-progress")


@pytest.mark.processes(2)
def test_on_two_gloo_ranks_a_corrupted_shard_and_a_shard_left_behind_exit_1(cli, tmp_path):
    """Two rows, each on 2 real gloo ranks: the corruption named by the shard's key, the
    shard left on the device by FSDP2's owner word; the gate exits 1."""
    out = tmp_path / "compare.json"
    rows = [f"corrupts={BAD}CorruptsOneShard", f"leaves={BAD}LeavesOneShard"]
    proc = cli("compare", *rows, *TINY, "--nproc-per-node", "2", "--json", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    runs = {r["label"]: r["outcome"] for r in json.loads(out.read_text())["runs"]}
    assert runs["corrupts"]["kind"] == "corrupted", runs
    assert "embed.weight" in runs["corrupts"]["detail"], runs
    assert "sharded_param differs" in proc.stdout + proc.stderr
    assert runs["leaves"]["kind"] in ("not offloaded", "partly offloaded"), runs
    assert "sharded_param" in runs["leaves"]["detail"], runs


def test_fake_shards_run_bit_exact_read_their_shards_and_say_what_is_not_real(cli, tmp_path):
    out = tmp_path / "compare.json"
    rows = ["verl_fsdp2+verl_optimizer", "exact+exact_optimizer"]
    cli(
        "compare",
        *rows,
        *TINY,
        *("--payload", "8MiB", "--shards", "5", "--shard-rank", "4", "--json", str(out)),
    )
    doc = json.loads(out.read_text())
    # every row's bytes come back bit for bit. verl's row, whose offload replaces storages
    # (model.to), reads its host held below the zero in CPU emulation under the fake
    # process group where glibc's mmap threshold is fixed (this session's, conftest.py;
    # with glibc's own it reads ok): an open defect of the emulation's accounting, said
    # "inconsistent", exit 1, never "ok". Only the fix's verdict is held here
    assert all(r["summary"]["integrity_ok"] for r in doc["runs"])
    kinds = {r["label"] or r["strategy"]: r["outcome"]["kind"] for r in doc["runs"]}
    assert kinds[rows[0].replace("+", " + ") + " [fsdp2]"] in ("ok", "inconsistent"), kinds
    assert [r["outcome"]["kind"] for r in doc["runs"][1:]] == ["ok"], kinds
    assert all(r["engine"] == "fsdp2" for r in doc["runs"])
    # the engine's readings after the offload, against FSDP2's dim-0 arithmetic done
    # apart (layout, torch-free): which of this rank's shards fall short of the chunk
    blocks = doc["runs"][0]["residency"][-1]
    shape = ModelShape.for_payload("plain", 8 * 2**20)
    uneven = sum(local_rows(t.dims[0], 5, 4) < chunk_rows(t.dims[0], 5) for t in shape.tensors())
    for run in doc["runs"]:
        got = run["residency"][-1]["engine_readings"]
        assert got["shards_uneven"] == uneven > 0, got
        assert got["shards_pinned"] == 0  # no page-locked memory without CUDA
    exact = doc["runs"][1]["residency"][-1]["engine_readings"]
    assert exact["shards"] == exact["shards_on_host"] == 3 * len(shape.tensors()), blocks
    text = " ".join(doc["emulation_note"].split())
    assert "rank 4 of 5 through PyTorch's fake process group" in text
    assert "collectives are not" in text and "no reference run" in text


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--engine", "fsdp2", "--tp", "2"), "--tp is megatron's parallelism"),
        (("--engine", "fsdp2", "--precision-aware"), "torch.optim.AdamW"),
        (("--engine", "fsdp2", "--preset", "qwen9"), "is not an FSDP2 shape preset"),
        (("--preset", "qwen2.5-7b"), "add --engine fsdp2"),
        (("--shards", "8"), "add --engine fsdp2"),
        (("--engine", "fsdp2", "--shards", "4", "--shard-rank", "4"), "is not a rank of 4"),
    ],
)
def test_options_of_the_other_engine_exit_2_in_one_line(invoke, args, words):
    strategy = "exact" if "fsdp2" in args else "lazy"
    result = invoke("run", "--strategy", strategy, "--no-progress", *args)
    assert result.exit_code == 2, result.stdout + result.stderr
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_strategy_of_the_other_engine_exits_2_listing_this_ones(invoke):
    result = invoke("run", "--engine", "fsdp2", "--strategy", "lazy", "--no-progress")
    assert result.exit_code == 2
    assert "does not serve engine 'fsdp2'" in result.stderr and "verl_fsdp2" in result.stderr


ADVERSARIES = {
    "parked": (f"{BAD}ExactTellsTheModel+{BAD}ParksMomentsInFrameworkSlot", "not offloaded"),
    "grads": (f"{BAD}LeavesGradients", "partly offloaded"),
    "host": (f"exact+{BAD}LoadsToTheHost", "corrupted"),
    "copy": (f"{BAD}KeepsAShardCopy", "not offloaded"),
    "split": (f"{BAD}SplitsTheView", "corrupted"),
    "lr": (f"exact+{BAD}DoublesLrBehindItsRepr", "corrupted"),
}


@pytest.mark.processes(2)
def test_strategies_written_to_fool_the_gate_fail_it(cli, tmp_path):
    """Each found an escape (or a crash) in an adversarial review: a device copy of the
    moments parked in one of FSDP2's own group slots; gradients left on the device (views
    of one flat storage, counted as one); a load that leaves the state on the host; a
    shard clone on the strategy (the copy search crashed on a DTensor); a local tensor
    split from the storage FSDP2 all-gathers; an ``lr`` doubled behind a ``repr`` of the
    old value (no reference run here: the group check alone). One compare, each row
    expected to fail, and
    an honest row whose load takes a device id (it gets one)."""
    out = tmp_path / "compare.json"
    rows = [f"{name}={spec}" for name, (spec, _) in ADVERSARIES.items()]
    rows.append(f"honest=exact+{BAD}DeviceIdLoad")  # verl's load(optimizer, device_id) shape
    expect = [
        f"--expect={name}={kind.replace(' ', '-')}" for name, (_, kind) in ADVERSARIES.items()
    ]
    args = (
        "--engine",
        "fsdp2",
        "--layers",
        "1",
        "--cycles",
        "1",
        "--no-progress",
        "--no-reference-check",
    )
    proc = cli("compare", *rows, *args, *expect, "--json", str(out))
    doc = json.loads(out.read_text())
    got = {r["label"]: (r["outcome"]["kind"], r["outcome"]["detail"]) for r in doc["runs"]}
    want = {k: v[1] for k, v in ADVERSARIES.items()} | {"honest": "ok"}
    assert {k: v[0] for k, v in got.items()} == want, got
    assert proc.returncode == 0, proc.stdout + proc.stderr  # every row failed as expected
    assert "sharded_grad" in got["grads"][1] and "not on the device after load" in got["host"][1]
    assert "sharded_param" in got["copy"][1] and "no longer views" in got["split"][1]
    assert "'lr' changed in the round trip (0.001 -> 0.002 (_SameRepr))" in got["lr"][1]
