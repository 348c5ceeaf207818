"""Every verb's JSON against its shipped JSON Schema (``offloadprobe/schemas``), on the
hand-built records the golden tests render: they validate, they carry the one
``schema_version``, and a document that breaks its schema is refused. The CLI's own
documents are validated where tests already write them (``test_show_cli``,
``test_run_cpu``, ``test_compare_cpu``, ``test_attach_cpu``, the plugin's save).
After a record changes:

    python tools/schemas.py
"""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import replace

import jsonschema
import pytest

from offloadprobe.attach.report_json import attach_json, schema_version_of
from offloadprobe.core.records import SCHEMA_VERSION
from offloadprobe.core.verdicts import judge
from offloadprobe.plan.probe import ProbePlan
from offloadprobe.plan.shard_plan import project_shards
from offloadprobe.schemas import NAMES, load, name_of, validate
from tests.conftest import ROOT
from tests.unit import attach_fakes
from tests.unit import reporter_fakes as fake

sys.path.insert(0, str(ROOT / "tools"))
import schemas as tool


def _run(run):
    """A ``run --json`` document: the report with its verdict, as the CLI writes it."""
    report = fake.report(run, emulated=run.gpu_baseline_bytes is None)
    return replace(report, verdicts=[judge(r)[0] for r in report.runs]).to_dict()


def _probe_plan():
    from offloadprobe.core.config import ModelConfig

    return ProbePlan(
        model=ModelConfig(),
        device="cpu",
        cycles=2,
        payload_bytes=48 * fake.MiB,
        strategies=tuple(fake.probe_rows()),
        measured=tuple(fake.measured_rows()),
    ).to_dict()


def _compare():
    """The golden comparison with the keys the CLI adds around it (``cli/compare.py``)."""
    environment = {
        "device": "cuda:0 (NVIDIA H200)",
        "emulated": False,
        "emulation_note": None,
        "payload_bytes": 5 * fake.GiB,
        "versions": fake.VERSIONS,
        "machine": {"hostname": "fake", "cpus": 2},
        "model": {"num_layers": 2},
        "settings": {"cycles": 2},
    }
    return replace(fake.comparison(), environment=environment, budgets=["--max-host-peak 1.7x"])


DOCUMENTS = {
    "run-cpu": lambda: _run(fake.cpu_run()),
    "run-gpu": lambda: _run(fake.gpu_run()),
    "run-parts": lambda: _run(fake.parts_run()),
    "run-stopped": lambda: _run(fake.stopped_run()),
    "run-not-offloaded": lambda: _run(fake.not_offloaded_run()),
    "run-world": lambda: _run(fake.world_run()),
    "compare": lambda: _compare().to_dict(),
    "compare-parts": lambda: replace(
        fake.parts_comparison(), environment=_compare().environment
    ).to_dict(),
    "plan": lambda: fake.scenario_plan().to_dict(),
    "probe-plan": _probe_plan,
    "shard-plan": lambda: project_shards("qwen2.5-7b", 2, 24).to_dict(),
    "repro": lambda: fake.repro().to_dict(),
    "attach-cpu": lambda: attach_json(attach_fakes.job(gpu=False, never=True)),
    "attach-failed": lambda: attach_json(attach_fakes.job(exit_code=-9, gpu=False)),
    "attach-ranks": lambda: attach_json(attach_fakes.job(ranks=2)),
}


def _doc(name: str) -> dict:
    return json.loads(json.dumps(DOCUMENTS[name]()))  # as a file holds it


def test_the_shipped_schemas_are_the_records_own():
    for name in NAMES:
        assert load(name) == json.loads(tool.text(name)), f"{name}: {tool.__doc__.split()[-1]}"
    assert tool.main(["--check"]) == 0


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_every_document_validates_and_carries_the_one_schema_version(name):
    doc = _doc(name)
    validate(doc)
    assert doc["schema_version"] == SCHEMA_VERSION
    assert "schema" not in doc  # attach's old key is gone


def test_a_schema_requires_keys_and_types_not_anything():
    doc = _doc("run-gpu")
    for name in NAMES:
        schema = load(name)
        assert schema["type"] == "object" and "schema_version" in schema["properties"]
        assert len(schema.get("required", [])) >= 4, name
    broken = []
    wrong = copy.deepcopy(doc)
    wrong["runs"][0]["summary"]["host_peak_bytes"] = "5 GiB"
    broken.append(wrong)
    missing = copy.deepcopy(doc)
    del missing["runs"][0]["cycles"][0]["phases"][0]["host"]
    broken.append(missing)
    unjudged = copy.deepcopy(doc)
    del unjudged["runs"][0]["exit_code"]
    broken.append(unjudged)
    older = copy.deepcopy(doc)
    older["schema_version"] = 4
    broken.append(older)
    for bad in broken:
        with pytest.raises(jsonschema.ValidationError):
            validate(bad)


def test_a_compare_row_without_a_record_is_valid_a_half_record_is_not():
    doc = _doc("compare")
    killed = next(r for r in doc["runs"] if r["strategy"] == "registered")
    assert killed["summary"] is None
    validate(doc)
    half = copy.deepcopy(doc)
    ok = next(r for r in half["runs"] if r["strategy"] == "lazy")
    del ok["baseline_host_bytes"]
    with pytest.raises(jsonschema.ValidationError):
        validate(half)


def test_an_attach_file_written_before_schema_version_still_reads():
    doc = _doc("attach-failed")
    assert schema_version_of(doc) == SCHEMA_VERSION
    old = {("schema" if k == "schema_version" else k): v for k, v in doc.items()}
    old["schema"] = 1
    validate(old, "attach")
    assert schema_version_of(old) == 1 and name_of(old) == "attach"
    del old["schema"]
    with pytest.raises(jsonschema.ValidationError):
        validate(old, "attach")


def test_alloc_conf_json_validates(invoke, monkeypatch, tmp_path):
    from offloadprobe.core import alloc_conf

    setting = alloc_conf.PinnedSetting(
        key="pinned_use_background_threads", exists=True, meaning="m", checked_by="x"
    )
    monkeypatch.setattr(alloc_conf, "pinned_settings", lambda: [setting])
    out = tmp_path / "a.json"
    assert invoke("alloc-conf", "--json", str(out)).exit_code == 0
    doc = json.loads(out.read_text())
    validate(doc)
    assert (doc["kind"], doc["schema_version"]) == ("alloc-conf", SCHEMA_VERSION)
