"""Write the JSON Schema of every verb's ``--json`` document into ``offloadprobe/schemas/``.

Each document is made of typed records (``dataclasses.asdict``), so each schema is made
from the same records' type hints: every field a required key of its type (``int``:
integer, ``X | None``: X or null, a record: its own definition), extra keys allowed (keys
are only ever added). What a document adds around its records (``run_to_dict``'s
``cycles`` and ``label``, the verdict keys, ``compare``'s row keys, attach's call keys)
is declared here. Run it after a record changes; ``--check`` exits 1 where a shipped file
differs (``tests/unit/test_json_schemas.py`` does the same):

    python tools/schemas.py
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from offloadprobe.attach.records import Call, JobRecord  # noqa: E402
from offloadprobe.core.alloc_conf import PinnedSetting  # noqa: E402
from offloadprobe.core.budgets import Breach  # noqa: E402
from offloadprobe.core.outcomes import Failure, Verdict  # noqa: E402
from offloadprobe.core.records import SCHEMA_VERSION, PhaseRecord, Report, RunRecord  # noqa: E402
from offloadprobe.plan.probe import ProbePlan  # noqa: E402
from offloadprobe.plan.scenario_plan import ScenarioPlan  # noqa: E402
from offloadprobe.plan.shard_plan import ShardPlan  # noqa: E402
from offloadprobe.repro.records import Repro, ReproOutcome  # noqa: E402

OUT = ROOT / "offloadprobe" / "schemas"
DRAFT = "https://json-schema.org/draft/2020-12/schema"
NULL = {"type": "null"}
SIMPLE = {int: "integer", float: "number", str: "string", bool: "boolean"}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    if set(schema) == {"type"} and isinstance(schema["type"], str):
        return {"type": [schema["type"], "null"]}
    return {"anyOf": [schema, NULL]}


def obj(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    """An object with these keys, all required unless ``required`` says which."""
    return {
        "type": "object",
        "required": sorted(properties if required is None else required),
        "properties": properties,
    }


def array(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


class Schema:
    """One document's schema: its records' definitions, each made once."""

    def __init__(self, names: dict[type, str] | None = None) -> None:
        self.defs: dict[str, Any] = {}
        self.names = dict(names or {})
        """Records whose definition is declared by hand under this name."""

    def ref(self, cls: type) -> dict[str, Any]:
        name = self.names.get(cls, cls.__name__)
        if name not in self.defs:
            self.defs[name] = {}  # a record that holds itself (a world's ranks)
            self.defs[name] = self.record(cls)
        return {"$ref": f"#/$defs/{name}"}

    def record(self, cls: type, *, drop: tuple[str, ...] = ()) -> dict[str, Any]:
        """A record as ``asdict`` writes it: every field, required, of its hinted type."""
        hints = typing.get_type_hints(cls)
        found = {
            f.name: self.of(hints[f.name]) for f in dataclasses.fields(cls) if f.name not in drop
        }
        return obj(found)

    def of(self, hint: Any) -> dict[str, Any]:
        """The schema of a value of type ``hint``."""
        if hint is Any or hint is object:
            return {}
        if hint is type(None):
            return NULL
        if hint in SIMPLE:
            return {"type": SIMPLE[hint]}
        if dataclasses.is_dataclass(hint) and isinstance(hint, type):
            return self.ref(hint)
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin is typing.Literal:
            return {"enum": list(args)}
        if origin in (typing.Union, types.UnionType):
            kinds = [a for a in args if a is not type(None)]
            one = self.of(kinds[0]) if len(kinds) == 1 else {"anyOf": [self.of(a) for a in kinds]}
            return nullable(one) if len(kinds) < len(args) else one
        if origin in (list, tuple) or origin is typing.Sequence:
            if origin is tuple and len(args) > 1 and args[1] is not Ellipsis:
                return {"type": "array", "prefixItems": [self.of(a) for a in args], "minItems": 2}
            return array(self.of(args[0])) if args else {"type": "array"}
        if origin is dict:
            return {"type": "object", "additionalProperties": self.of(args[1]) if args else {}}
        raise TypeError(f"no JSON Schema for {hint!r}")

    def document(self, name: str, title: str, body: dict[str, Any]) -> dict[str, Any]:
        head = {
            "$schema": DRAFT,
            "$id": f"{name}.schema.json",
            "title": title,
        }
        return {**head, **body, "$defs": dict(sorted(self.defs.items()))}


VERSION = {"type": "integer", "minimum": SCHEMA_VERSION}
"""The one schema version every verb's document carries (``core.records.SCHEMA_VERSION``);
a later one only adds keys."""


def _kind(kind: str) -> dict[str, Any]:
    return {"const": kind}


def run_entry(schema: Schema) -> dict[str, Any]:
    """One run as ``run_to_dict`` writes it: the record less its phases, grouped per cycle,
    its label, and its failure as the record and the flat keys of schema 2."""
    entry = schema.record(RunRecord, drop=("phases", "label_override", "failure"))
    entry["properties"].update(
        cycles=array(obj({"cycle": {"type": "integer"}, "phases": array(schema.ref(PhaseRecord))})),
        label={"type": "string"},
        failure_record=nullable(schema.ref(Failure)),
        failure=nullable({"type": "string"}),
        failure_kind=nullable({"type": "string"}),
        failure_cycle=nullable({"type": "integer"}),
        failure_phase=nullable({"type": "string"}),
    )
    entry["required"] = sorted(entry["properties"])
    return entry


def judged(schema: Schema) -> dict[str, Any]:
    """The keys a judged row adds (``core.records.judged``)."""
    return {
        "verdict": {"type": "string"},
        "outcome": schema.ref(Verdict),
        "exit_code": {"type": "integer", "enum": [0, 1, 2]},
        "not_offloaded": array({"type": "string"}),
    }


def with_runs(schema: Schema) -> Schema:
    schema.defs["run"] = {}
    schema.names[RunRecord] = "run"
    schema.defs["run"] = run_entry(schema)
    return schema


ENVIRONMENT = {
    "device": {"type": "string"},
    "emulated": {"type": "boolean"},
    "emulation_note": {"type": ["string", "null"]},
    "payload_bytes": {"type": "integer"},
    "versions": {"type": "object", "additionalProperties": {"type": ["string", "null"]}},
    "machine": {"type": "object"},
    "model": {"type": "object"},
    "settings": {"type": "object"},
}


def run_document() -> dict[str, Any]:
    schema = with_runs(Schema())
    keys = judged(schema)
    row = {"allOf": [{"$ref": "#/$defs/run"}, obj(keys)]}
    top = schema.record(Report, drop=("runs", "verdicts"))
    top["properties"].update(kind=_kind("run"), schema_version=VERSION, runs=array(row))
    top["properties"]["budgets"] = array({"type": "string"})
    top["required"] = sorted(top["properties"])
    return schema.document("run", "offloadprobe run --json", top)


def compare_document() -> dict[str, Any]:
    schema = with_runs(Schema())
    keys = {
        **judged(schema),
        "strategy": {"type": "string"},
        "summary": {},
        "cycles": {"type": "array"},
        "label": {"type": "string"},
        "name": {"type": ["string", "null"]},
        "optimizer_strategy": {"type": "string"},
        "alloc_conf": {"type": ["string", "null"]},
        "expect": {"type": ["string", "null"]},
        "budgets": array({"type": "string"}),
        "worker_exit_code": {"type": ["integer", "null"]},
        "breaches": array(schema.ref(Breach)),
    }
    no_record = obj({"summary": NULL, "cycles": {"type": "array", "maxItems": 0}})
    row = {"allOf": [obj(keys), {"anyOf": [{"$ref": "#/$defs/run"}, no_record]}]}
    top = obj(
        {
            **ENVIRONMENT,
            "schema_version": VERSION,
            "kind": _kind("compare"),
            "budgets": array({"type": "string"}),
            "baseline": {"type": "string"},
            "runs": array(row),
        }
    )
    return schema.document("compare", "offloadprobe compare --json", top)


def _verb(name: str, title: str, cls: type, kind: str, **extra: Any) -> dict[str, Any]:
    """A verb whose document is one record (``{"kind": ..., **asdict(record)}``)."""
    schema = Schema()
    top = schema.record(cls)
    top["properties"].update(schema_version=VERSION, kind=_kind(kind))
    for key, (cls_of, added) in extra.items():  # a record list whose rows gain keys
        row = {"allOf": [schema.ref(cls_of), obj(added)]}
        top["properties"][key] = array(row)
    top["required"] = sorted(top["properties"])
    return schema.document(name, title, top)


def plan_document() -> dict[str, Any]:
    return _verb("plan", "offloadprobe plan SCENARIO --json", ScenarioPlan, "plan")


def probe_plan_document() -> dict[str, Any]:
    rows = typing.get_type_hints(ProbePlan)
    figures = {"figures": {"type": "string"}}
    return _verb(
        "probe-plan",
        "offloadprobe plan --probe --json",
        ProbePlan,
        "probe plan",
        strategies=(typing.get_args(rows["strategies"])[0], figures),
        measured=(typing.get_args(rows["measured"])[0], figures),
    )


def shard_plan_document() -> dict[str, Any]:
    return _verb("shard-plan", "offloadprobe plan --engine fsdp2 --json", ShardPlan, "shard plan")


def repro_document() -> dict[str, Any]:
    matches = {"matches": {"type": "boolean"}}
    return _verb(
        "repro", "offloadprobe repro --json", Repro, "repro", outcomes=(ReproOutcome, matches)
    )


OLD_ATTACH_BREACH = {
    "type": "object",
    "properties": {k: {"type": "string"} for k in ("budget", "value", "limit", "where")},
    "required": ["budget", "limit", "value", "where"],
}
"""attach's own breach, before schema 6 took every verb's (``show`` reads both)."""


def attach_document() -> dict[str, Any]:
    """``attach_json``: the job's record with calls as ``Call.to_json`` writes them."""
    schema = Schema({Call: "call"})
    call = schema.record(Call)
    call["properties"].update(
        parent=nullable(
            {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]}
        ),
        host_peak_bytes={"type": "integer"},
        host_peak_by={"type": ["string", "null"]},
        host_growth_bytes={"type": "integer"},
        device_moved_bytes={"type": ["integer", "null"]},
    )
    call["required"] = sorted(call["properties"])
    schema.defs["call"] = call
    record = schema.record(JobRecord)["properties"]
    top = obj(
        {
            "schema_version": VERSION,
            "job_exit_code": {"type": "integer"},
            "job_signal": {"type": ["integer", "null"]},
            "exit_code": {"type": "integer"},
            "command": record["command"],
            "seconds": {"type": "number"},
            "calls": array({"$ref": "#/$defs/call"}),
            "phases": record["phases"],
            "ranks": record["ranks"],
            "nodes": record["nodes"],
            "processes": record["processes"],
            "not_instrumented": record["uninstrumented"],
            "escaped": record["escaped"],
            "peak_resets": record["peak_resets"],
            "never_called": array({"type": "string"}),
            "breaches": array({"anyOf": [schema.ref(Breach), OLD_ATTACH_BREACH]}),
            "budgets": array({"type": "string"}),
            "outcome": schema.ref(Verdict),
            "interrupted": {"type": ["integer", "null"]},
            "not_judged": array({"type": "string"}),
            "notes": array({"type": "string"}),
            "records_dir": {"type": ["string", "null"]},
        }
    )
    # files attach wrote before the one key: ``"schema": 1`` where ``schema_version`` is
    top["required"].remove("schema_version")
    top["anyOf"] = [{"required": ["schema_version"]}, obj({"schema": {"const": 1}})]
    return schema.document("attach", "offloadprobe attach --json", top)


def alloc_conf_document() -> dict[str, Any]:
    schema = Schema()
    top = obj(
        {
            "schema_version": VERSION,
            "kind": _kind("alloc-conf"),
            "torch": {"type": "string"},
            "cuda": {"type": ["string", "null"]},
            "settings": array(schema.ref(PinnedSetting)),
        }
    )
    return schema.document("alloc-conf", "offloadprobe alloc-conf --json", top)


def pytest_document() -> dict[str, Any]:
    """``--offloadprobe-save``: a judged run entry per test, with its test's node id."""
    schema = with_runs(Schema())
    added = {
        **judged(schema),
        "test": {"type": "string"},
        "device": {"type": "string"},
        "emulated": {"type": "boolean"},
        "model": {"type": "object"},
        "settings": {"type": "object"},
    }
    row = {"allOf": [{"$ref": "#/$defs/run"}, obj(added)]}
    top = obj(
        {
            "schema_version": VERSION,
            "kind": _kind("pytest"),
            "versions": ENVIRONMENT["versions"],
            "machine": {"type": "object"},
            "runs": array(row),
        }
    )
    return schema.document("pytest", "pytest --offloadprobe-save", top)


DOCUMENTS = {
    "run": run_document,
    "compare": compare_document,
    "plan": plan_document,
    "probe-plan": probe_plan_document,
    "shard-plan": shard_plan_document,
    "repro": repro_document,
    "attach": attach_document,
    "alloc-conf": alloc_conf_document,
    "pytest": pytest_document,
}


def text(name: str) -> str:
    return json.dumps(DOCUMENTS[name](), indent=2) + "\n"


def main(argv: list[str]) -> int:
    stale = []
    for name in DOCUMENTS:
        path = OUT / f"{name}.schema.json"
        wanted = text(name)
        if "--check" in argv:
            if not path.exists() or path.read_text() != wanted:
                stale.append(path.name)
        else:
            path.write_text(wanted)
    if stale:
        print(f"stale: {', '.join(stale)}; regenerate with: python tools/schemas.py")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
