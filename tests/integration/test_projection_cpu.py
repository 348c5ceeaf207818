"""benchmarks/projection_validation.py runs on CPU: a smoke test of the H200 script.

The projection itself is checked against in-process measurements in test_run_cpu.py;
this only proves the script measures, projects and writes its JSON. Its main and its one
child run in this process (``InProcessChild``: real children are test_compare_cpu's).
"""

from __future__ import annotations

import importlib.util
import json
import sys

from tests.conftest import ROOT
from tests.fakes import InProcessChild, install_child


def test_script_measures_and_projects_one_row(tmp_path, capsys, monkeypatch):
    spec = importlib.util.spec_from_file_location(
        "projection_validation", ROOT / "benchmarks" / "projection_validation.py"
    )
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look it up
    spec.loader.exec_module(module)
    install_child(monkeypatch, InProcessChild(tmp_path))
    out = tmp_path / "projection.json"
    code = module.main(
        [
            "--device",
            "cpu",
            "--sizes",
            "16MiB",
            "--strategies",
            "lazy",
            "--cycles",
            "1",
            "--train-steps",
            "0",
            "--jobs",
            "1",
            "--out",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["emulated"] is True and doc["versions"]["torch"]
    (row,) = doc["rows"]
    assert row["strategy"] == "lazy" and row["size"] == "16MiB"
    assert row["payload_bytes"] == row["predicted_payload_bytes"], row
    assert abs(row["relative_error"]) <= 0.05, row
    assert "lazy" in capsys.readouterr().out  # the table it prints
