"""A third-party strategy registered through an entry point works in run, compare, plan
and repro alike, with no line of offloadprobe naming it (docs/contributing.md)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from offloadprobe.cli import main
from offloadprobe.engine.strategies import MODEL_STRATEGIES

pytestmark = pytest.mark.processes(1)  # compare's child

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--layers", "1", "--hidden", "128", "--heads", "4", "--vocab", "512", "--seq-length", "32"]

PLUGIN = '''
from collections.abc import Sequence

import torch

from offloadprobe.plugin import (
    ModelStrategyInfo, ddp_buffers, free_storage, restore_storage, restore_zeroed_grads,
)
from offloadprobe.layout.pinned import Alloc


class Swap:
    """Exact-size host copy per buffer, kept across cycles."""

    def __init__(self, runtime):
        self.runtime = runtime
        self.copies = {}

    def offload(self, models):
        for i, buffer in enumerate(ddp_buffers(models)):
            host = self.copies.get(i)
            if host is None:
                host = self.copies[i] = torch.empty_like(buffer.param_data, device="cpu")
            host.copy_(buffer.param_data)
            free_storage(buffer.param_data)
            free_storage(buffer.grad_data)

    def load(self, models):
        for i, buffer in enumerate(ddp_buffers(models)):
            restore_storage(buffer.param_data)
            buffer.param_data.copy_(self.copies[i])
            restore_zeroed_grads(buffer)


def host_events(payloads: Sequence[int], cycles: int, labels: Sequence[str]):
    return [Alloc(name=f"{n} copy", nbytes=b, kind="pageable") for n, b in zip(labels, payloads)]


STRATEGY = ModelStrategyInfo(
    name="swap", summary="test plug-in: exact host copy, reused", factory=Swap,
    host_events=host_events, emulation="the same as on CUDA",
)
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    site = tmp_path / "site"
    (site / "ep_offload-0.1.dist-info").mkdir(parents=True)
    (site / "ep_offload.py").write_text(textwrap.dedent(PLUGIN))
    info = site / "ep_offload-0.1.dist-info"
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-offload\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[offloadprobe.model_strategies]\nswap = ep_offload:STRATEGY\n"
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", f"{site}:{ROOT}")
    MODEL_STRATEGIES.refresh()
    yield site
    MODEL_STRATEGIES.refresh()


def _main(args: list[str]) -> int:
    with pytest.raises(SystemExit) as info:
        main(args)
    return int(info.value.code or 0)


def test_plugin_in_all_four_verbs(plugin, tmp_path, monkeypatch):
    assert "swap" in MODEL_STRATEGIES.names()

    # plan: projected from the plug-in's own host_events
    plan = tmp_path / "p.json"
    assert _main(["plan", "--probe", "--device", "cpu", *TINY, "--json", str(plan)]) == 0
    rows = {r["strategy"]: r for r in json.loads(plan.read_text())["strategies"]}
    assert rows["swap"]["peak"] == rows["pageable"]["peak"] > 0

    # run, in this process
    out = tmp_path / "run.json"
    code = _main(
        [
            "run",
            "--strategy",
            "swap",
            "--device",
            "cpu",
            "--cycles",
            "1",
            *TINY,
            "--no-progress",
            "--no-reference-check",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    run = json.loads(out.read_text())["runs"][0]
    assert run["strategy"] == "swap" and run["summary"]["integrity_ok"]
    assert run["description"] == "test plug-in: exact host copy, reused"

    # compare: the child process finds the entry point too
    out = tmp_path / "compare.json"
    code = _main(
        [
            "compare",
            "swap",
            "--device",
            "cpu",
            "--cycles",
            "1",
            *TINY,
            "--no-reference-check",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    assert [r["verdict"] for r in json.loads(out.read_text())["runs"]] == ["ok"]

    # repro: a scenario may expect it, and its child runs it (here in this process: that a
    # fresh process finds the entry point is what compare showed above)
    from tests.fakes import InProcessChild, install_child

    child = install_child(monkeypatch, InProcessChild(tmp_path))
    text = (ROOT / "scenarios/ci-small.toml").read_text()
    start, end = text.index("[expect]"), text.index("[source]")
    scenario = tmp_path / "swap.toml"
    scenario.write_text(text[:start] + '[expect]\nswap = "ok"\n\n' + text[end:])
    out = tmp_path / "repro.json"
    code = _main(
        [
            "repro",
            str(scenario),
            "--device",
            "cpu",
            "--no-cgroup",
            "--cycles",
            "1",
            "--json",
            str(out),
        ]
    )
    assert code == 0, (tmp_path / "repro.json").read_text() if out.exists() else ""
    outcomes = json.loads(out.read_text())["outcomes"]
    assert [(o["strategy"], o["observed"]) for o in outcomes] == [("swap", "ok")]
    assert [spec.config.strategy for spec in child.specs] == ["swap"]
