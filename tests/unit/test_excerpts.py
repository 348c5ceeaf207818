"""The output the README and docs show is what the commands print today.

Each marked block (``tools/excerpts.py``) was made by a real run, whose documents are
kept in ``docs/excerpts/``. Nothing is run here: the marker's command must be the one
recorded (``make run`` follows the Makefile) and still parse, and today's reporter must
render the recorded documents to exactly the block. When one fails, regenerate:

    python tools/excerpts.py
"""

from __future__ import annotations

import io
import sys

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import excerpts as tool

FOUND = [e for path in tool.markdown_files() for e in tool.excerpts(path)]
REGENERATE = "regenerate with: python tools/excerpts.py"


def _id(excerpt: tool.Excerpt) -> str:
    return f"{excerpt.path.name}:{excerpt.spec}"


def test_the_readme_shows_make_run_as_a_marked_excerpt():
    assert any(e.path.name == "README.md" and e.spec == "make run" for e in FOUND)


@pytest.mark.parametrize("excerpt", FOUND, ids=_id)
def test_an_excerpt_is_what_its_command_prints_today(excerpt, monkeypatch):
    record = tool.stored(excerpt)
    assert record is not None, f"{_id(excerpt)} has no stored run: {REGENERATE}"
    commands = excerpt.commands()
    recorded = [entry["command"] for entry in record["runs"]]
    assert recorded == commands, f"{_id(excerpt)} was made by {recorded}: {REGENERATE}"
    for argv in commands:
        if argv[:1] == ["offloadprobe"]:
            _parses(argv[1:])
    documents = [entry.get("document") for entry in record["runs"]]
    if excerpt.stream != "stdout" or None in documents:
        return  # shown as it was printed (attach's report, a tool's output): not re-rendered
    monkeypatch.setenv("COLUMNS", str(tool.WIDTH))
    rendered = "".join(_render(doc) for doc in documents)
    assert excerpt.select(rendered) == excerpt.shown, f"{_id(excerpt)} differs: {REGENERATE}"


def _parses(args: list[str]) -> None:
    """The verb's flags and values are still accepted (nothing runs)."""
    from offloadprobe.cli import _command, _register

    _register()
    verb = _command().commands[args[0]]
    verb.make_context(args[0], list(args[1:]))


def _render(doc: dict) -> str:
    from offloadprobe.report.documents import document
    from offloadprobe.report.reporters import render

    out = io.StringIO()
    render(document(doc), out)
    return out.getvalue()
