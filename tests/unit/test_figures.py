"""Every measured figure README.md and the docs show is what a committed result holds.

``tools/figures.py`` writes each marked figure and table from ``benchmarks/results/`` (or
the excerpts' stored runs). Nothing runs here: the files are read, each marker is filled
again in memory and compared with the Markdown. When one fails, regenerate:

    python tools/figures.py
"""

from __future__ import annotations

import re
import sys

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import excerpts
import figures as tool

REGENERATE = "regenerate with: python tools/figures.py"
PAGES = tool.markdown_files()
PENDING = {"docs/scenario-keys.md"}
"""Pages another branch adds (the scenario key reference); linked before they land."""


def _name(path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_each_marked_figure_and_table_is_what_its_result_holds(page):
    _, drift = tool.rewrite(page)
    assert not drift, "\n".join(str(d) for d in drift) + f"\n{REGENERATE}"


@pytest.mark.parametrize("page", tool.STRICT)
def test_no_measured_figure_is_typed_in_the_readme_or_a_strict_page(page):
    """A multiple, a size or a rate in prose must come from a marker (code is input)."""
    assert tool.unmarked(ROOT / page) == [], f"{page}: mark each with <!-- figure: ... -->"


def test_the_readme_reads_in_two_minutes_and_shows_its_make_run_excerpt():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 125
    assert "<!-- excerpt: make run -->" in text and "source .venv/bin/activate" in text
    assert tool.FIGURE.search(text) and tool.TABLE.pattern


def test_a_prose_figure_from_the_make_run_excerpt_is_in_the_excerpt():
    """The numbers under the excerpt come from its stored run, so they read as it does."""
    readme = ROOT / "README.md"
    (block,) = [e for e in excerpts.excerpts(readme) if e.spec == "make run"]
    marked = [
        m for m in tool.FIGURE.finditer(readme.read_text()) if "readme-make-run.json" in m["spec"]
    ]
    assert len(marked) >= 2
    for m in marked:
        assert m["value"] and re.search(rf"(?<![\d.]){re.escape(m['value'])}", block.shown)


def test_a_drifted_figure_and_table_are_found_and_written_again(tmp_path):
    """GIVEN a page whose figure and table disagree with the results WHEN the tool reads it
    THEN both are reported and the rewritten text holds the results' values."""
    source = "h200-2026-12-01-compare-5gib.json"
    page = tmp_path / "page.md"
    page.write_text(
        f"naive peaks at <!-- figure: {source} naive host_peak_x -->9.99x of "
        f"<!-- figure: {source} - payload_bytes -->5.00 GiB.\n\n"
        "<!-- table: h200-compare -->\n| stale |\n|---|\n\n"
        "as code, not a marker: `<!-- figure: FILE ROW KEY -->`\n"
    )
    text, drift = tool.rewrite(page)
    assert [d.what for d in drift] == [f"{source} naive host_peak_x", "table h200-compare"]
    assert "-->4.22x of" in text and "-->5.00 GiB." in text
    assert "\n".join(tool.h200_compare()) in text and "| stale |" not in text
    assert text.endswith("\nas code, not a marker: `<!-- figure: FILE ROW KEY -->`\n")


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("h200-2026-12-01-compare-5gib.json nobody host_peak_x", "matches 0 entries"),
        ("h200-2026-12-01-compare-5gib.json naive no_such_key", "no key"),
        ("no-such-result.json naive host_peak_x", "no result file"),
        ("h200-2026-12-01-compare-5gib.json naive host_peak_x pct", "format 'pct'"),
    ],
)
def test_a_marker_naming_nothing_fails_with_the_reason(spec, says):
    with pytest.raises(tool.FigureError, match=says):
        tool.figure(spec)


def test_an_unmarked_figure_in_prose_is_found_and_code_is_not():
    lines = [
        "peak 4.22x and 21.10 GiB at 55.0 GB/s",
        "`--max-host-peak 1.5x`, <!-- figure: f.json naive host_peak_x -->4.22x, 2 ranks",
        "```",
        "3.11x in a code block",
        "```",
    ]
    assert tool.unmarked_lines(lines) == ["1: 4.22x", "1: 21.10 GiB", "1: 55.0 GB/s"]


LINK = re.compile(r"\]\((?!https?://|#)(?P<target>[^)#\s]+)(?:#(?P<anchor>[^)\s]+))?\)")


def _anchors(text: str) -> set[str]:
    """GitHub's anchors for a page's headings (lower case, punctuation out, spaces to -)."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_each_relative_link_names_a_file_and_heading_that_exist(page):
    for m in LINK.finditer(page.read_text()):
        target = (page.parent / m["target"]).resolve()
        name = target.relative_to(ROOT).as_posix() if target.is_relative_to(ROOT) else ""
        if name in PENDING and not target.exists():
            continue
        assert target.exists(), f"{_name(page)}: {m['target']} does not exist"
        if m["anchor"] and target.suffix == ".md":
            assert m["anchor"] in _anchors(target.read_text()), f"{_name(page)}: {m[0]}"
