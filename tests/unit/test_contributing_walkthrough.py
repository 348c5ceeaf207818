"""docs/contributing.md's walkthrough, held true: a new built-in strategy or reporter is its
module alone (plus its test), found by the registry with no other line naming it."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

from offloadprobe.core.registry import Registry

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "contributing.md").read_text()


def _block(heading: str) -> str:
    """The first ```python block under ``heading`` in the walkthrough."""
    section = DOC.split(heading, 1)[1]
    return textwrap.dedent(re.search(r"```python\n(.*?)```", section, re.S).group(1))


def _package(tmp_path: Path, name: str, files: dict[str, str]) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    for stem, text in files.items():
        (folder / f"{stem}.py").write_text(text)
    return folder


def test_the_documented_strategy_module_is_registered_by_itself(tmp_path, monkeypatch):
    code = _block("## A new model-parameter strategy")
    folder = _package(tmp_path, "walk_strategies", {"halfway": code, "helpers": "X = 1\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    registry: Registry[object] = Registry("model strategy", "none.group", lambda n, f: f)
    registry.register_package("walk_strategies", folder, first=("lazy",))
    assert registry.names() == ["halfway"]  # helpers.py declares no STRATEGY
    info = registry.get("halfway")
    assert info.name == "halfway" and info.factory is not None
    # and it works: a bit-exact round trip with its host copy, a double offload a no-op
    from tests.conftest import TINY, invoke_cli, with_flags

    spec = "walk_strategies.halfway:Halfway"
    steps = ("--sequence", "double-offload")  # its own steps: no --cycles
    result = invoke_cli(
        "run", *with_flags(TINY, cycles=None), "--no-progress", *steps, "--strategy", spec
    )
    assert result.exit_code == 0, result.stderr + result.stdout
    assert "round trip bit-exact" in result.stdout
    sys.modules.pop("walk_strategies.halfway", None)


def test_the_documented_reporter_module_is_registered_by_itself(tmp_path, monkeypatch):
    code = _block("## A new reporter")
    folder = _package(tmp_path, "walk_formats", {"short": code})
    monkeypatch.syspath_prepend(str(tmp_path))
    registry: Registry[object] = Registry(
        "reporter", "none.group", lambda n, f: f, attribute="REPORTER"
    )
    registry.register_package("walk_formats", folder)
    reporter = registry.get("short")
    assert reporter.name == "short" and "run" in reporter.kinds
    import io

    from offloadprobe.report.documents import Document
    from tests.unit.reporter_fakes import cpu_run, report

    out = io.StringIO()
    run = cpu_run()
    reporter.render(Document(kind="run", record=report(run, emulated=True)), out)
    from offloadprobe.core.verdicts import judge

    assert out.getvalue() == f"{run.label}: {judge(run)[0].kind}\n"
    sys.modules.pop("walk_formats.short", None)


def test_the_built_in_registries_list_every_module_that_declares_one():
    from offloadprobe.engine.optimizer.strategies import OPTIMIZER_STRATEGIES
    from offloadprobe.engine.strategies import MODEL_STRATEGIES
    from offloadprobe.report.reporters import REPORTERS

    pkg = ROOT / "offloadprobe"
    for registry, folder, attribute in [
        (MODEL_STRATEGIES, pkg / "engine" / "strategies", "STRATEGY"),
        (OPTIMIZER_STRATEGIES, pkg / "engine" / "optimizer" / "strategies", "STRATEGY"),
        (REPORTERS, pkg / "report" / "formats", "REPORTER"),
    ]:
        declared = {
            p.stem
            for p in folder.glob("*.py")
            if re.search(rf"^{attribute}\b", p.read_text(), re.M)
        }
        assert declared <= set(registry.names()), (folder, declared)
