"""Golden output of every reporter, colourless, at 80 and 120 columns.

The records are built by hand (``reporter_fakes``), so every number is exact. After an
intended change of the output, regenerate the files and review the diff:

    OFFLOADPROBE_UPDATE_GOLDEN=1 python -m pytest tests/unit/test_reporters_golden.py
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from offloadprobe.report.comparison_table import render_comparison
from offloadprobe.report.markdown import comparison_markdown
from offloadprobe.report.plan_table import render_measured, render_plan, render_probe
from offloadprobe.report.repro_table import render_repro
from offloadprobe.report.table import render_report, residency_table
from tests.unit import reporter_fakes as fake

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
UPDATE = os.environ.get("OFFLOADPROBE_UPDATE_GOLDEN") == "1"


def _residency(console: Console) -> None:
    console.print(residency_table(fake.gpu_run(), gpu=True))


RENDERERS: dict[str, Callable[[Console], None]] = {
    "run-cpu": lambda c: render_report(fake.report(fake.cpu_run(), emulated=True), c),
    "run-cpu-corrupted": lambda c: render_report(
        fake.report(fake.cpu_run(integrity=False), emulated=True), c
    ),
    "run-stopped": lambda c: render_report(fake.report(fake.stopped_run(), emulated=True), c),
    "run-not-offloaded": lambda c: render_report(
        fake.report(fake.not_offloaded_run(), emulated=True), c
    ),
    "run-gpu": lambda c: render_report(fake.report(fake.gpu_run(), emulated=False), c),
    "run-parts": lambda c: render_report(fake.report(fake.parts_run(), emulated=False), c),
    "compare-parts": lambda c: render_comparison(fake.parts_comparison(), c),
    "residency": _residency,
    "compare": lambda c: render_comparison(fake.comparison(), c),
    "compare-cpu": lambda c: render_comparison(fake.cpu_comparison(), c),
    "plan": lambda c: render_plan(fake.scenario_plan(), c, terms=True),
    "plan-probe": lambda c: render_probe(fake.probe_rows(), c, title="probe model: 1000 MiB"),
    "plan-probe-measured": lambda c: render_measured(
        fake.probe_rows(), fake.measured_rows(), c, title="probe model: 48 MiB"
    ),
    "repro": lambda c: render_repro(fake.repro(), c),
    "run-world": lambda c: render_report(fake.report(fake.world_run(), emulated=True), c),
}


def render(name: str, width: int) -> str:
    """What a CI log of ``width`` columns shows: no colour, trailing spaces dropped."""
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, force_terminal=False)
    RENDERERS[name](console)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"


def check(actual: str, path: Path) -> None:
    if UPDATE or not path.exists():
        path.write_text(actual)
        if not UPDATE:
            pytest.fail(f"{path.name} was missing and has been written: review and commit it")
    assert actual == path.read_text(), f"output differs from {path}"


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("name", sorted(RENDERERS))
def test_reporter_output_is_pinned(name: str, width: int) -> None:
    check(render(name, width), GOLDEN / f"{name}-{width}.txt")


def test_markdown_is_pinned() -> None:
    check(comparison_markdown(fake.comparison(), environment="NVIDIA H200"), GOLDEN / "compare.md")


@pytest.mark.parametrize("name", sorted(RENDERERS))
def test_80_columns_fit_without_truncation(name: str) -> None:
    text = render(name, 80)
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_run_leads_with_the_verdict_naming_both_strategies() -> None:
    first = render("run-cpu", 80).splitlines()[0]
    assert first == "lazy + none: ok, round trip bit-exact"
    assert render("run-cpu-corrupted", 80).splitlines()[0] == "lazy + none: corrupted"


def test_optimizer_state_kept_by_none_reads_as_intended() -> None:
    text = render("run-cpu", 80)
    assert "optimizer state not offloaded (--optimizer-strategy none)" in text
    assert "left on device (emulated) after offload" not in text  # no residency table


def test_state_left_behind_by_a_moving_strategy_is_flagged() -> None:
    text = render("run-gpu", 80)
    assert "legacy left on the device: master_param" in text
    assert "master_param" in render("residency", 80)


def test_columns_that_cannot_be_measured_here_are_dropped() -> None:
    def headers(text: str) -> str:
        return " ".join(line for line in text.splitlines() if line.startswith("strategy "))

    cpu = render("compare-cpu", 80)
    assert "pinned" not in headers(cpu) and "GPU left" not in cpu
    assert "pinned" in headers(render("compare", 80))
    assert "GPU peak" not in render("run-cpu", 80) and "GPU peak" in render("run-gpu", 80)


def test_compare_verdict_cells_are_one_line_with_detail_below() -> None:
    lines = render("compare", 80).splitlines()
    killed = [ln for ln in lines if ln.startswith("registered")]
    assert killed[0].endswith("killed (2)")
    notes = [ln for ln in lines if ln.startswith("(2) registered")]
    assert notes and "killed: SIGKILL, cgroup OOM" in " ".join(lines[lines.index(notes[0]) :])


def test_a_strategy_that_did_not_offload_is_not_excused_as_kept() -> None:
    lines = render("run-not-offloaded", 80).splitlines()
    assert lines[0] == "keeps + none: not offloaded"
    params = next(ln for ln in lines if ln.startswith("parameters"))
    assert params.endswith("LEFT") and "(kept)" not in params
    assert "keeps left on the device: param_data" in lines


# -- saved records: what ``offloadprobe show`` renders of a verb's --json ----------------

SAVED: dict[str, Callable[[], dict]] = {
    "run-cpu": lambda: fake.report(fake.cpu_run(), emulated=True).to_dict(),
    "run-stopped": lambda: fake.report(fake.stopped_run(), emulated=True).to_dict(),
    "run-not-offloaded": lambda: fake.report(fake.not_offloaded_run(), emulated=True).to_dict(),
    "run-gpu": lambda: fake.report(fake.gpu_run(), emulated=False).to_dict(),
    "run-parts": lambda: fake.report(fake.parts_run(), emulated=False).to_dict(),
    "run-world": lambda: fake.report(fake.world_run(), emulated=True).to_dict(),
    "compare": lambda: fake.comparison().to_dict(),
    "compare-cpu": lambda: fake.cpu_comparison().to_dict(),
    "compare-parts": lambda: fake.parts_comparison().to_dict(),
    "plan": lambda: {**fake.scenario_plan().to_dict(), "printed": {"terms": True}},
    "repro": lambda: fake.repro().to_dict(),
}


def _show(doc: dict, width: int, format: str = "table") -> str:
    """``offloadprobe show`` of ``doc`` written to a file and read back, at ``width``."""
    import json

    from offloadprobe.report.documents import document
    from offloadprobe.report.reporters import REPORTERS

    saved = document(json.loads(json.dumps(doc)))  # exactly what the file holds
    out = io.StringIO()
    reporter = REPORTERS.get(format)
    if format == "table":
        from rich.console import Console as _Console

        real = _Console.__init__

        def narrow(self, *args, **kwargs):  # the log's width, colourless, as render() has
            kwargs.update(width=width, color_system=None, force_terminal=False)
            real(self, *args, **kwargs)

        _Console.__init__ = narrow
        try:
            reporter.render(saved, out)
        finally:
            _Console.__init__ = real
    else:
        reporter.render(saved, out)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("name", sorted(SAVED))
def test_a_saved_record_renders_exactly_as_it_was_printed(name: str, width: int) -> None:
    """The table reporter over the record read back from its JSON prints the golden file
    the record itself printed: nothing a reporter shows is lost in the file."""
    assert _show(SAVED[name](), width) == (GOLDEN / f"{name}-{width}.txt").read_text()


@pytest.mark.parametrize("name", ["run-cpu", "run-not-offloaded", "repro", "plan"])
def test_markdown_of_every_kind_is_pinned(name: str) -> None:
    check(_show(SAVED[name](), 80, "markdown"), GOLDEN / f"{name}.md")


def test_the_json_reporter_gives_back_the_file() -> None:
    import json

    doc = json.loads(json.dumps(SAVED["compare"]()))
    assert json.loads(_show(doc, 80, "json")) == doc
