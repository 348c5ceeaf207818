"""FSDP2's readings and the benchmark's table, on fakes: where a shard's bytes are after
an offload (its own storage, a strategy's host slice, nowhere), the sums, the rounding,
the by-key checks, and the benchmark's 80 columns."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from torch import nn

from offloadprobe.engines.fsdp2 import keyed, readings

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "fsdp2_rows.py"
spec = importlib.util.spec_from_file_location("fsdp2_rows", BENCH)
assert spec is not None and spec.loader is not None
fsdp2_rows = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fsdp2_rows)


class Slices:
    """A strategy that says where freed tensors' bytes went."""

    def __init__(self) -> None:
        self.copies: dict[int, torch.Tensor] = {}

    def host_copy(self, tensor: torch.Tensor) -> torch.Tensor | None:
        return self.copies.get(id(tensor))


def test_a_freed_shard_is_where_the_strategy_put_it_or_nowhere() -> None:
    model = nn.Linear(4, 3)  # no FSDPParam: its parameters are the shards (FSDP1's case)
    weight = model.weight
    slices = Slices()
    slices.copies[id(weight)] = torch.empty(12)
    weight.data.untyped_storage().resize_(0)
    homes = {h.key: h for h in readings.shard_homes(model, strategies=[slices])}
    assert (homes["weight"].home, homes["weight"].nbytes) == ("host", 48)
    assert (homes["bias"].home, homes["bias"].nbytes, homes["bias"].pinned) == ("host", 12, False)
    assert readings.shard_homes(model)[0].home == "nowhere"
    on_device = readings.shard_homes(model, is_device=lambda t: True)
    assert [h.home for h in on_device] == ["nowhere", "device"]


def test_pinning_sums_and_rounding() -> None:
    rows = [
        readings.ShardHome(key="a", nbytes=100, home="host", pinned=True),
        readings.ShardHome(key="b", nbytes=50, home="host", pinned=False),
        readings.ShardHome(key="c", nbytes=70, home="device", pinned=False),
    ]
    got = readings.pinning(rows)
    assert (got.shards, got.pinned, got.on_host, got.on_device) == (3, 1, 2, 1)
    assert (got.requested_pinned, got.host_bytes) == (100, 150)
    assert readings.rounding(256, 100) == 2.56 and readings.rounding(256, 0) is None


def test_by_key_checks_name_the_changed_tensor() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    before, prints = keyed.snapshot(model), keyed.fingerprint(model)
    with torch.no_grad():
        model[1].bias.view(torch.int32)[0] ^= 1  # one bit of one element
    assert keyed.mismatches(before, model) == ["1.bias"]
    assert keyed.changed(prints, keyed.fingerprint(model)) == ["1.bias"]


def test_the_benchmark_table_fits_80_columns() -> None:
    cycle = {
        "cycle": 2,
        "offload_s": 12.34,
        "offload_gbps": 123.4,
        "load_s": 0.06,
        "host_peak_x": 1.98,
        "held_after_load_x": 1.98,
        "locked_x": 1.98,
        "locked_over_requested": 1.98,
        "pinned_after_offload": 339,
        "shards": 1017,
        "device_allocated_after_offload": int(1.08 * 2**30),
    }
    rows = [
        {"row": "cpu_offload_pageable", "cycles": [cycle, {**cycle, "locked_x": None}]},
        {"row": "verl_fsdp1", "refused": "verl_fsdp1 needs a GPU (FSDP1 refuses CPU) " * 3},
    ]
    lines = fsdp2_rows.table(rows).splitlines()
    assert len(lines) == 5 and max(map(len, lines)) <= 80
    assert lines[2].split()[:2] == ["cpu_offload_pageable", "2"] and " - " in lines[3]
