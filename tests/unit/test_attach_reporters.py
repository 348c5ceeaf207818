"""attach's reporters on hand-made records (``attach_fakes``): golden text at 80 and 120
columns, Markdown, and the JSON document's stable keys. After an intended change:

    OFFLOADPROBE_UPDATE_GOLDEN=1 python -m pytest tests/unit/test_attach_reporters.py
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from rich.console import Console

from offloadprobe.attach import verdict
from offloadprobe.attach.report_json import attach_json
from offloadprobe.attach.report_markdown import attach_markdown
from offloadprobe.attach.report_table import render_attach
from tests.unit import attach_fakes as fake

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
UPDATE = os.environ.get("OFFLOADPROBE_UPDATE_GOLDEN") == "1"


def _over_budget():
    budgets = verdict.Budgets.parse(host_peak="40MiB", host_growth=None, node_peak=None)
    return verdict.judge(fake.job(ranks=2), budgets)


RECORDS = {
    "attach-cpu": lambda: fake.job(gpu=False, never=True),
    "attach-gpu-ranks": _over_budget,
    "attach-failed": lambda: fake.job(exit_code=-9, gpu=False),
    "attach-tricked": fake.tricked,
}


def _text(name: str, width: int) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, force_terminal=False)
    render_attach(RECORDS[name](), console)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"


def _check(path: Path, text: str) -> None:
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"{path} missing: run with OFFLOADPROBE_UPDATE_GOLDEN=1"
    assert text == path.read_text()


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("name", sorted(RECORDS))
def test_the_terminal_report_matches_its_golden_file(name, width):
    text = _text(name, width)
    assert max(len(line) for line in text.splitlines()) <= width
    _check(GOLDEN / f"{name}-{width}.txt", text)


def test_no_number_is_cut_at_80_columns():
    text = _text("attach-gpu-ranks", 80)
    assert "…" not in text and "..." not in text.split("\n", 1)[1]
    for figure in ("64.00 MiB", "32.00 MiB", "4.00 MiB", "5.00 GiB", "2.03 GiB", "2.04 GiB"):
        assert figure in text


def test_markdown_matches_its_golden_file():
    _check(GOLDEN / "attach.md", attach_markdown(_over_budget()))


def test_json_has_the_stable_keys_with_bytes_as_integers():
    doc = json.loads(json.dumps(attach_json(fake.job(exit_code=-9))))
    assert doc["job_exit_code"] == 137 and doc["job_signal"] == 9 and doc["exit_code"] == 1
    call = doc["calls"][2]
    for key in (
        "phase",
        "pid",
        "rank",
        "index",
        "seconds",
        "raised",
        "host_before_bytes",
        "host_after_bytes",
        "host_peak_bytes",
        "pinned_after_bytes",
        "gpu_allocated_after_bytes",
        "gpu_driver_used_after_bytes",
    ):
        assert key in call, key
    assert (call["phase"], call["index"], call["host_peak_bytes"]) == ("offload", 2, 64 * fake.MIB)
    assert call["host_after_bytes"] - call["host_before_bytes"] == call["host_growth_bytes"] == 0
    assert doc["not_instrumented"][0]["pid"] == 4200
    assert doc["phases"][0]["worst"]["index"] == 2


def test_growth_per_phase_and_rank_is_after_the_last_call_less_after_the_first():
    record = fake.job(ranks=2)
    growth = {(g.phase, g.rank): g for g in record.growth}
    assert sorted(growth) == [("load", 0), ("load", 1), ("offload", 0), ("offload", 1)]
    # the first offload keeps its 32 MiB copy (its own growth), then nothing more: 0 B
    # from first to last; the second load leaks 4 MiB
    assert growth["offload", 0].host_growth_bytes == 0
    assert growth["load", 1].host_growth_bytes == 4 * fake.MIB
    assert all(g.calls == 2 and g.pinned_growth_bytes == 0 for g in growth.values())
    doc = json.loads(json.dumps(attach_json(record)))
    assert {(g["phase"], g["rank"], g["host_growth_bytes"]) for g in doc["growth"]} == {
        ("offload", 0, 0),
        ("offload", 1, 0),
        ("load", 0, 4 * fake.MIB),
        ("load", 1, 4 * fake.MIB),
    }
    cpu = fake.job(gpu=False)
    assert all(g.pinned_growth_bytes is None for g in cpu.growth)  # not measured: n/a


@pytest.mark.parametrize("name", sorted(RECORDS))
@pytest.mark.parametrize("schema_key", ["schema", "schema_version"])
def test_show_renders_a_saved_attach_result_as_attach_printed_it(name, schema_key):
    from offloadprobe.attach.report_json import record_from_json
    from offloadprobe.report.documents import document
    from offloadprobe.report.reporters import render

    record = RECORDS[name]()
    doc = json.loads(json.dumps(attach_json(record)))
    assert record_from_json(doc) == record
    doc[schema_key] = doc.pop("schema_version")
    del doc["kind"]  # a document of another version, known by its keys
    saved = document(doc)
    assert saved.kind == "attach" and saved.record == record
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLUMNS", "80")
        render(saved, out)
    shown = "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"
    assert shown == _text(name, 80)
    markdown = io.StringIO()
    render(saved, markdown, format="markdown")
    assert markdown.getvalue() == attach_markdown(record)
