"""``offloadprobe show`` prints a verb's saved --json exactly as the verb printed it, and
neither ``show`` nor ``plan`` imports torch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, TINY
from tests.fakes import FakeChild, install_child

pytestmark = pytest.mark.processes(2)  # the two torch-free interpreters


def _same(invoke, tmp_path, *args: str, columns: int = 80) -> str:
    from offloadprobe.schemas import validate

    out = tmp_path / "saved.json"
    verb = invoke(*args, "--json", str(out), columns=columns)
    validate(json.loads(out.read_text()))  # its kind's shipped JSON Schema
    shown = invoke("show", str(out), columns=columns)
    assert shown.exit_code == 0, shown.stderr
    assert shown.stdout == verb.stdout, (verb.stdout, shown.stdout)
    return verb.stdout


@pytest.mark.parametrize("columns", [80, 120])
def test_show_reprints_run(invoke, fake_runner, tmp_path, columns):
    fake_runner.runs["naive"] = dict(host_peak_x=3.0, steady_x=2.0)
    printed = _same(
        invoke,
        tmp_path,
        "run",
        "--strategy",
        "naive",
        "--device",
        "cpu",
        "--no-progress",
        "--max-host-peak",
        "1.5x",
        columns=columns,
    )
    assert printed.startswith("naive + none: over budget")


def test_show_reprints_compare(invoke, monkeypatch, tmp_path):
    child = install_child(monkeypatch, FakeChild())
    child.runs["naive"] = dict(host_peak_x=3.0)
    _same(invoke, tmp_path, "compare", "naive", "lazy", "--device", "cpu", *TINY[2:], "--force")


@pytest.mark.parametrize("terms", ["--terms", "--no-terms"])
def test_show_reprints_plan(invoke, tmp_path, terms):
    _same(invoke, tmp_path, "plan", str(ROOT / "scenarios/ci-small.toml"), terms)
    _same(invoke, tmp_path, "plan", "--probe", "--payload", "64MiB", "--device", "cpu", terms)


def test_show_reprints_repro(invoke, monkeypatch, tmp_path):
    from offloadprobe.repro import reproduce as repro_module
    from tests.unit import reporter_fakes as fake

    monkeypatch.setattr(repro_module, "reproduce", lambda *a, **k: fake.repro())
    out = tmp_path / "r.json"
    verb = invoke("repro", "ci-small", "--device", "cpu", "--json", str(out), columns=80)
    shown = invoke("show", str(out), columns=80)
    assert shown.stdout == verb.stdout


def test_show_refuses_what_is_not_a_result_in_one_line(invoke, tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"hello": 1}')
    rc, out, err = invoke("show", str(bad))
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "not an offloadprobe result" in err
    rc, _, err = invoke("show", str(bad), "--format", "yaml")
    assert rc == 2 and "unknown reporter 'yaml'" in err


def _torch_free(code: str) -> None:
    probe = f"import sys\n{code}\nprint('torch' in sys.modules)\n"
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.stdout.strip().splitlines()[-1] == "False", proc.stdout + proc.stderr


def test_plan_show_attach_and_help_import_no_torch(tmp_path):
    """``plan`` of a scenario and of the probe (no --strategy: nothing runs), ``show``,
    ``--help`` of the program and of a measuring verb, and ``attach`` itself (its job, a
    Python process marking no phase, is judged as measuring nothing: exit 1)."""
    saved = tmp_path / "plan.json"
    _torch_free(
        "from offloadprobe.cli import main\n"
        f"saved = {str(saved)!r}\n"
        "probe = ['plan', '--probe', '--device', 'cpu', '--layers', '1', '--json', saved + '2']\n"
        "job = ['attach', '--no-cgroup', '--', sys.executable, '-c', 'pass']\n"
        "for args, code in ((probe, 0), (['plan', 'verl-6193', '--json', saved], 0),\n"
        "        (['show', saved], 0), (['--help'], 0), (['run', '--help'], 0), (job, 1)):\n"
        "    try:\n"
        "        main(args)\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code == code, (args, exc.code)\n"
    )
    assert json.loads(saved.read_text())["kind"] == "plan"
