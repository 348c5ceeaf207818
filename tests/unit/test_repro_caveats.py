"""``repro`` says up front what this host cannot reproduce: an outcome that rests on
pinned-memory rounding, on a host without CUDA, is a warning before the first child starts
(stderr) and in the report's header, with a ``[repro] payload`` that is projected to
reproduce it where there is one. The header names the probe model in words. Projections
only: no child runs (``run_host_job`` is replaced)."""

from __future__ import annotations

import json

import pytest

from offloadprobe.repro.caveats import caveats
from offloadprobe.repro.reproduce import probe_model, selected
from offloadprobe.scenarios import load_scenario
from offloadprobe.scenarios.catalog import packaged
from tests.conftest import ROOT

CI_SMALL = (ROOT / "scenarios/ci-small.toml").read_text()
ROUNDING = CI_SMALL.replace('host_memory_per_node = "88MiB"', 'host_memory_per_node = "175MiB"')
"""ci-small under 175 MiB: naive's later cycles hold 184 MiB on CUDA (two 64 MiB pinned
blocks and a 56 MiB pageable copy) but 168 MiB in CPU emulation, where nothing is pinned."""


def _caveats(tmp_path, text: str, device: str) -> list[str]:
    path = tmp_path / "s.toml"
    path.write_text(text)
    s = load_scenario(path)
    return caveats(s, probe_model(s), selected(s, ()), device=device, cycles=3)


def test_an_oom_that_rests_on_pinned_rounding_is_said_on_a_host_without_cuda(tmp_path):
    (line,) = _caveats(tmp_path, ROUNDING, "cpu")
    assert line == (
        "naive is expected oom, and its scaled run is projected ok here: host peak 168.26 MiB, "
        "under the scaled limit 175.00 MiB (on CUDA 184.09 MiB, over it): the outcome rests on "
        "pinned-memory rounding to a power of two, and this host has no CUDA, so nothing is "
        "pinned; run it on a CUDA host (no [repro] payload from 8.00 MiB to 128.00 MiB "
        "reproduces it here)"
    )
    assert _caveats(tmp_path, ROUNDING, "cuda") == []


def test_a_payload_that_reproduces_it_is_named_where_there_is_one(tmp_path):
    # lazy's single pinned block of a 64 MiB payload is exactly 64 MiB: under the limit;
    # a payload just above a power of two rounds up to twice itself
    text = (
        CI_SMALL.replace('host_memory_per_node = "88MiB"', 'host_memory_per_node = "60MiB"')
        .replace('lazy = "ok"', 'lazy = "oom"')
        .replace('payload = "56MiB"', 'payload = "64MiB"')
    )
    (line,) = _caveats(tmp_path, text, "cuda")
    assert line.startswith("lazy is expected oom, and its scaled run is projected ok here")
    suggested = line.rpartition('[repro] payload = "')[2].partition('"')[0]
    assert suggested.endswith("MiB"), line
    fixed = text.replace('payload = "64MiB"', f'payload = "{suggested}"')
    assert _caveats(tmp_path, fixed, "cuda") == []  # projected to reproduce every outcome


@pytest.mark.parametrize("path", packaged(), ids=lambda p: p.stem)
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_shipped_scenarios_need_no_warning(path, device):
    s = load_scenario(path)
    assert caveats(s, probe_model(s), selected(s, ()), device=device, cycles=3) == []


def test_the_warning_comes_before_any_child_and_in_the_header(invoke, tmp_path, monkeypatch):
    from offloadprobe.repro import reproduce as module
    from offloadprobe.repro.records import ReproOutcome

    started: list[str] = []

    def fake_job(job, workdir, *, use_cgroup=True):
        started.append(job.strategy)
        observed = "oom" if job.strategy != "naive" and job.expected == "oom" else "ok"
        return ReproOutcome(
            strategy=job.strategy,
            kind="params",
            expected=job.expected,
            observed=observed,  # naive: ok, as the warning said
            detail="fake",
            method="fake",
        )

    from offloadprobe.repro import caveats as projections

    warned: list[tuple[str, int]] = []
    real = projections.caveats

    def counting(*args, **kwargs):
        lines = real(*args, **kwargs)
        warned.extend((line, len(started)) for line in lines)
        return lines

    monkeypatch.setattr(module, "run_host_job", fake_job)
    monkeypatch.setattr(projections, "caveats", counting)
    monkeypatch.chdir(tmp_path)  # a short path: the header's line fits
    (tmp_path / "rounding.toml").write_text(ROUNDING)
    out = tmp_path / "repro.json"
    result = invoke(
        "repro", "rounding.toml", "--device", "cpu", "--no-progress", "--json", str(out)
    )
    assert result.exit_code == 1  # naive: expected oom, observed ok
    assert started == ["naive", "lazy", "registered", "pageable"]
    assert [n for _, n in warned] == [0]  # said before the first child started
    first = result.error_lines[0]
    assert first.startswith("offloadprobe: warning: naive is expected oom") and "CUDA" in first
    head = result.stdout.splitlines()[:2]
    assert head[0] == (
        "scenario rounding.toml; probe model: 4 layers, hidden 512, 16 heads, vocab 16384"
    ), head
    assert "{" not in result.stdout.splitlines()[0]  # no raw dict
    assert head[1].startswith("warning: naive is expected oom")
    assert json.loads(out.read_text())["warnings"] == [warned[0][0]]
