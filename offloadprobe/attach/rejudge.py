"""A saved attach result judged again from its facts, as ``show`` judges a run's rows.

The calls, nodes and processes are the facts; the budgets are the words the document
says the job was held to (``budgets``), parsed by attach's own parser and applied by its
own judge (``attach.verdict``). The stored breaches and outcome are never taken on their
word: where the stored outcome (or exit code) is not what the facts judge, the result is
shown as judged and one line says so (``core.rejudge.disagreement``). A file written
before ``budgets`` and ``outcome`` (schema 5 and older) keeps its stored breaches: its
budgets are not known, and there is no stored outcome to contradict.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, replace
from typing import Any

from offloadprobe.attach.records import JobRecord
from offloadprobe.attach.verdict import Budgets, exit_code, judge, outcome
from offloadprobe.core.records import verdict_from_dict
from offloadprobe.core.rejudge import check_finite, disagreement


def rejudged(
    record: JobRecord, data: dict[str, Any], *, where: str
) -> tuple[JobRecord, dict[str, Any], list[str]]:
    """The record judged from its facts, its JSON (with the judged breaches, outcome and
    exit code where they differ from the stored ones), and one line per disagreement."""
    check_finite(data, where=where)
    if "budgets" in data:
        budgets = Budgets.from_words(tuple(data.get("budgets") or ()), where=where)
        record = judge(replace(record, breaches=(), unjudged=()), budgets)
    if not data.get("outcome"):
        return record, data, []
    judged = outcome(record)
    stored = verdict_from_dict(data["outcome"])
    code = exit_code(record)
    lines = []
    if (line := disagreement(where, stored, judged)) is not None:
        lines.append(line)
    elif data.get("exit_code") != code:
        lines.append(
            f"{where}: its stored exit code {data.get('exit_code')!r} is not what its facts "
            f"judge, {code}: shown as judged (the record was changed after it was written)"
        )
    if lines:
        data = copy.deepcopy(data)
        data.update(
            outcome=asdict(judged),
            exit_code=code,
            breaches=[asdict(b) for b in record.breaches],
            not_judged=list(record.unjudged),
        )
    return record, data, lines
