"""At 80 columns no table of any verb cuts a number or an identifier across lines.

Each reporter renders into a console that keeps what it was asked to print; every
word of every cell (and of every term's label, formula and value) must then stand
whole on one output line. A folded word (``PowerOf2Ceil(44060467`` / ``2)``) is on
none. The records are the golden tests' hand-built ones, plus every packaged
scenario's real projection with its term tables (arithmetic, no torch).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator

import pytest
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from offloadprobe.attach.report_table import render_attach
from offloadprobe.report.terms import TermList
from tests.unit.test_attach_reporters import RECORDS as ATTACH_RECORDS
from tests.unit.test_reporters_golden import RENDERERS

WIDTH = 80


class _Keeping(Console):
    """A colourless console of ``WIDTH`` columns that keeps every object it printed."""

    def __init__(self, out: io.StringIO) -> None:
        super().__init__(file=out, width=WIDTH, color_system=None, force_terminal=False)
        self.printed: list[object] = []

    def print(self, *objects, **kwargs) -> None:  # type: ignore[override]
        self.printed.extend(objects)
        super().print(*objects, **kwargs)


def _plain(cell: object) -> str:
    return cell.plain if isinstance(cell, Text) else Text.from_markup(str(cell)).plain


def strings(obj: object) -> Iterator[str]:
    """What a renderable shows, as the strings it was given (table cells unescaped)."""
    if isinstance(obj, Table):
        for column in obj.columns:
            yield _plain(column.header)
            yield from (_plain(cell) for cell in column.cells)
    elif isinstance(obj, Group):
        for inner in obj.renderables:
            yield from strings(inner)
    elif isinstance(obj, TermList):
        yield from obj.texts()


def cut_words(render: Callable[[Console], None]) -> list[str]:
    """Words of the tables ``render`` prints that no output line holds whole."""
    out = io.StringIO()
    console = _Keeping(out)
    render(console)
    lines = out.getvalue().splitlines()
    assert max(len(line.rstrip()) for line in lines) <= WIDTH
    words = {word for obj in console.printed for s in strings(obj) for word in s.split()}
    return sorted(w for w in words if not any(w in line for line in lines))


def _scenario_plans() -> dict[str, Callable[[Console], None]]:
    from offloadprobe.plan.scenario_plan import project_scenario
    from offloadprobe.report.plan_table import render_plan
    from offloadprobe.scenarios import load_scenario
    from offloadprobe.scenarios.catalog import packaged

    return {  # a dense scenario and an MoE one: every kind of term label
        f"plan {path.stem} --terms": lambda c, p=path: render_plan(
            project_scenario(load_scenario(p)), c, terms=True
        )
        for path in packaged()
        if path.stem in ("ci-small", "verl-6193-pinned-peak")
    }


def _alloc_conf(console: Console) -> None:
    from offloadprobe.cli.alloc_conf import render
    from offloadprobe.core.alloc_conf import PINNED_KEYS, PinnedSetting

    settings = [
        PinnedSetting(key=k, exists=True, meaning=m, checked_by="library strings")
        for k, (_, m) in PINNED_KEYS.items()
    ]
    console.print(render(settings, "2.13.0+cpu"))


CASES: dict[str, Callable[[Console], None]] = {
    **RENDERERS,
    **{name: lambda c, r=rec: render_attach(r(), c) for name, rec in ATTACH_RECORDS.items()},
    **_scenario_plans(),
    "alloc-conf": _alloc_conf,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_no_table_cuts_a_word_at_80_columns(name: str) -> None:
    assert cut_words(CASES[name]) == []


def test_the_check_finds_a_cut_word() -> None:
    """A table too narrow for its identifier folds it: the check must say so."""

    def narrow(console: Console) -> None:
        table = Table()
        table.add_column("name", overflow="fold")
        table.add_column("value", no_wrap=True)
        table.add_row("decoder.layers.*.self_attention.linear_qkv.weight", "x" * 60)
        console.print(table)

    assert cut_words(narrow) == ["decoder.layers.*.self_attention.linear_qkv.weight"]


def test_plan_fits_a_screen_and_keeps_its_verdicts(invoke) -> None:
    """``plan verl-6193`` at 80 columns: at most 40 lines, every verdict among them; the
    term tables only behind --terms (their words whole: the cases above)."""
    result = invoke("plan", "verl-6193", columns=WIDTH)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) <= 40
    assert any(line.startswith("naive        1805.85 GiB > 1700.00 GiB  OOM") for line in lines)
    assert "optimizer strategies: worst device" in lines
    assert "PowerOf2Ceil" not in result.stdout and "--terms" in result.stdout
