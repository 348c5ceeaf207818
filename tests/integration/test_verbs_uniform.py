"""What every verb does alike: ``--no-progress`` is accepted by each, and each file a verb
writes is named on stderr. In-process, workers faked: the logic of the CLI only."""

from __future__ import annotations

import pytest

from offloadprobe.cli import VERBS


def _command(verb: str):
    from offloadprobe.cli import _command, _register

    _register()
    return _command().commands[verb]


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_every_verb_takes_no_progress(verb):
    flags = {flag for p in _command(verb).params for flag in (*p.opts, *p.secondary_opts)}
    assert "--no-progress" in flags


def test_compare_names_each_file_it_wrote_and_shows_no_progress(invoke, tmp_path, monkeypatch):
    from tests.fakes import FakeChild, install_child

    install_child(monkeypatch, FakeChild())
    json_path, markdown = tmp_path / "c.json", tmp_path / "out" / "c.md"
    result = invoke(
        "compare",
        "naive",
        "lazy",
        "--device",
        "cpu",
        "--no-progress",
        "--json",
        str(json_path),
        "--markdown",
        str(markdown),
    )
    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines() == [f"wrote JSON {json_path}", f"wrote Markdown {markdown}"]
    assert json_path.is_file() and markdown.is_file()


def test_plan_names_its_json(invoke, tmp_path):
    out = tmp_path / "plan.json"
    result = invoke("plan", "ci-small", "--no-progress", "--json", str(out))
    assert result.exit_code == 0, result.stderr
    assert result.stderr == f"wrote JSON {out}\n" and out.is_file()
