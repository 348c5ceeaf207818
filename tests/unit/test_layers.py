"""The package's layers: imports only go downward, and the CLI's front door imports no torch."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import check_layers  # noqa: E402


def test_imports_only_go_down_the_layers():
    assert check_layers.violations(ROOT) == []


def test_check_layers_catches_an_upward_import(tmp_path):
    core = tmp_path / "offloadprobe" / "core"
    core.mkdir(parents=True)
    (core / "bad.py").write_text("from offloadprobe.engine.runner import run\n")
    assert check_layers.violations(tmp_path) == ["offloadprobe/core/bad.py: core imports engine"]


def test_check_layers_catches_the_harness_importing_an_engine_and_engines_each_other(tmp_path):
    engine = tmp_path / "offloadprobe" / "engine"
    fsdp2 = tmp_path / "offloadprobe" / "engines" / "fsdp2"
    for folder in (engine, fsdp2):
        folder.mkdir(parents=True)
    (engine / "runner.py").write_text("from offloadprobe.engines.megatron import builder\n")
    (fsdp2 / "model.py").write_text(
        "from offloadprobe.engines.fsdp2 import presets\n"  # its own wing: fine
        "from offloadprobe.engines.megatron.buffers import ddp_buffers\n"
    )
    assert check_layers.violations(tmp_path) == [
        "offloadprobe/engine/runner.py: engine imports engines",
        "offloadprobe/engines/fsdp2/model.py: engine fsdp2 imports engine megatron",
    ]


def test_help_and_every_verb_import_no_torch():
    code = (
        "import sys, offloadprobe.cli as cli; cli._register(); "
        "import offloadprobe.scenarios.schema, offloadprobe.plan.projection; "
        "heavy = [m for m in ('torch', 'megatron') if m in sys.modules]; "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
