"""``offloadprobe compare``: strategies side by side, each in a fresh worker process."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from offloadprobe.cli import app
from offloadprobe.cli.budget_report import enforce, row_payload
from offloadprobe.cli.fit import check_fits
from offloadprobe.cli.params import parameter, with_options
from offloadprobe.cli.strategies import (
    check_strategies,
    check_strategy_options,
    model_help,
    optimizer_help,
    split_label,
)
from offloadprobe.cli.timeline import TimelineOutputs, compare_rows, output_parameters
from offloadprobe.compare.comparison import Candidate, split_pair
from offloadprobe.core import environment, extras, option_budgets
from offloadprobe.core import options as opts
from offloadprobe.core.devices import guess_device
from offloadprobe.core.errors import UsageError
from offloadprobe.core.outcomes import VERDICT_KINDS
from offloadprobe.core.regression import check_payloads, check_rows
from offloadprobe.core.world import check_trainable
from offloadprobe.isolation import zygote
from offloadprobe.report.documents import document
from offloadprobe.report.markdown import comparison_markdown, environment_line
from offloadprobe.report.output import check_writable, write_json, write_text
from offloadprobe.report.reporters import render
from offloadprobe.report.step_summary import append_step_summary

EXPECTABLE = tuple(k for k in VERDICT_KINDS if k not in ("unexpected pass", "not measured"))
"""What a canary row can be expected to be (``ok`` too: what every other row must be)."""

EXTRA = [
    parameter(
        "strategies",
        Annotated[
            list[str],
            typer.Argument(
                help="Strategies to compare, e.g. naive lazy registered; MODEL+OPTIMIZER "
                "(verl_fsdp2+verl_optimizer) is one row with its own optimizer strategy. "
                + model_help()
            ),
        ],
    ),
    parameter(
        "baseline",
        Annotated[str | None, typer.Option("--baseline", help="Row the ratios are taken against.")],
        None,
    ),
    parameter(
        "alloc_conf",
        Annotated[
            list[str] | None,
            typer.Option(
                "--alloc-conf",
                help="PyTorch allocator settings for the workers (PYTORCH_ALLOC_CONF), e.g. "
                "pinned_use_background_threads:True; see offloadprobe alloc-conf for the keys "
                "this torch has. Repeat to compare settings.",
            ),
        ],
        None,
    ),
    parameter(
        "expect",
        Annotated[
            list[str] | None,
            typer.Option(
                "--expect",
                help="A canary row: ROW=VERDICT, e.g. naive=over-budget (any verdict: "
                + ", ".join(k.replace(" ", "-") for k in EXPECTABLE if k != "ok")
                + "). That failure keeps the exit code 0 and is marked expected; a pass or "
                "another verdict exits 1. Repeatable.",
            ),
        ],
        None,
    ),
    parameter(
        "optimizer_strategy",
        Annotated[
            list[str] | None,
            typer.Option(
                "--optimizer-strategy",
                help="Repeat to compare each with every strategy. " + optimizer_help(),
            ),
        ],
        None,
    ),
    parameter(
        "json_path",
        Annotated[
            Path | None,
            typer.Option(
                "--json",
                help="Write every reading, the budgets and each row's verdict to this JSON file.",
            ),
        ],
        None,
    ),
    parameter(
        "markdown",
        Annotated[Path | None, typer.Option("--markdown", help="Write a Markdown table for a PR.")],
        None,
    ),
    parameter(
        "progress",
        Annotated[bool, typer.Option("--progress/--no-progress", help="Say which row runs.")],
        True,
    ),
    *output_parameters(),
]


@app.command("compare")
@with_options(opts.COMPARE, EXTRA)
def compare_command(values: dict[str, Any]) -> None:
    """Run each strategy in a fresh process with the same model, seed and cycles."""
    from offloadprobe.compare.comparison import candidates, compare
    from offloadprobe.core.alloc_conf import validate_alloc_conf

    extras.require("offloadprobe compare")  # before anything else: the workers import both
    json_path, markdown = values.pop("json_path"), values.pop("markdown")
    outputs = TimelineOutputs(trace=values.pop("trace"), plot=values.pop("plot"))
    check_writable(json_path, "--json")
    check_writable(markdown, "--markdown")
    outputs.check()
    show = values.pop("progress")
    specs = [split_label(s) for s in values.pop("strategies")]
    optimizer_names = values.pop("optimizer_strategy") or []
    alloc_confs = values.pop("alloc_conf") or []
    baseline = values.pop("baseline")
    expect = values.pop("expect") or []
    nproc, timeout, force = values.pop("nproc_per_node"), values.pop("timeout"), values.pop("force")
    if int(os.environ.get("WORLD_SIZE", "1") or "1") > 1:
        raise UsageError(
            "compare starts its own workers: run it outside torchrun, with --nproc-per-node "
            "for several ranks per row"
        )
    given = [split_pair(spec) for _, spec in specs]
    check_strategies(  # a misspelt name fails before anything starts
        [model for model, _ in given],
        optimizer_names + [o for _, o in given if o],
        model_place="compare {} ...",
        engine=values.get("engine") or "megatron",
    )
    parsed = option_budgets.budgets({k: values.pop(k) for k in opts.BUDGET_NAMES})
    base = opts.build_config(values)
    check_strategy_options([model for model, _ in given], base.strategy_options)
    if nproc < 1:
        raise UsageError("--nproc-per-node must be at least 1")
    base.parallel.dp(nproc)
    check_trainable(base.model, base.parallel)
    if nproc > 1 and outputs.wanted:
        raise UsageError("--trace/--plot record one process per row: drop them with ranks")
    device = guess_device(base.device)
    for conf in alloc_confs:
        validate_alloc_conf(conf)
    items = _expecting(candidates(specs, optimizer_names, alloc_confs, base.engine), expect)
    _unique(items)
    for line in check_rows(parsed.budgets, [c.label for c in items]):
        print(f"offloadprobe: {line}", file=sys.stderr)
    check_payloads(parsed.budgets, {c.label: row_payload(base, nproc) for c in items})
    pairs = [(c.strategy, c.optimizer_strategy or "none") for c in items]
    check_fits(
        base.model,
        strategies=pairs,
        optimizer=base.optimizer,
        device=device,
        force=force,
        ranks=nproc,
        model_parallel=base.parallel.model_parallel,
    )
    chosen = _baseline(baseline, items)
    zygote.expect(len(items))
    err = Console(file=sys.stderr)

    def started(index: int, item: Candidate) -> None:
        if show:
            err.print(
                f"({index + 1}/{len(items)}) {item.label}: running in a fresh process",
                markup=False,
                highlight=False,
            )

    def one(index: int, item: Candidate, config: Any, env: dict[str, str]) -> Any:
        return _row(
            config,
            env,
            device=device,
            budgets=parsed.budgets,
            nproc=nproc,
            timeout=timeout,
            timeline=outputs.wanted,
        )

    comparison = compare(
        items,
        base,
        baseline=chosen,
        measure=one,
        environment=_environment(base, device),
        budgets=parsed.budget_words,
        on_start=started,
    )
    doc = comparison.to_dict()
    render(document(doc), sys.stdout)  # what show prints of the saved file, by construction
    if outputs.wanted:
        runs = [row.run for row in comparison.rows]
        drawn = [row.timeline for row in comparison.rows]
        outputs.write_rows(compare_rows([c.label for c in items], runs, drawn, doc), doc)
    if json_path is not None:
        write_json(doc, json_path)
    text = comparison_markdown(comparison, environment=environment_line(doc))
    if markdown is not None:
        write_text(text, markdown, "--markdown")
    append_step_summary("compare", text)
    enforce([(r.candidate.label, r.verdict, r.breaches) for r in comparison.rows])


def _row(
    config: Any,
    env: dict[str, str],
    *,
    device: str,
    budgets: list[Any],
    nproc: int,
    timeout: float | None,
    timeline: bool,
) -> Any:
    from offloadprobe.isolation.rows import measure

    return measure(
        config,
        device=device,
        budgets=budgets,
        env=env,
        timeout_s=timeout,
        timeline=timeline,
        nproc_per_node=nproc,
    )


def _unique(items: list[Candidate]) -> None:
    labels = [c.label for c in items]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise UsageError(f"row {twice[0]!r} is given twice: name rows apart with name=strategy")


def _rows_named(name: str, items: list[Candidate]) -> list[Candidate]:
    """The rows ``name`` names: a full label, a row's own name, or a strategy."""
    return [c for c in items if name in (c.label, c.name, c.strategy, c.label.split(" [")[0])]


def verdict_kind(text: str, flag: str = "--expect") -> str:
    """A verdict's name as the command line spells it (``over-budget``) as its kind."""
    import difflib

    kind = " ".join(text.replace("-", " ").replace("_", " ").lower().split())
    if kind in EXPECTABLE:
        return kind
    names = [k.replace(" ", "-") for k in EXPECTABLE]
    near = difflib.get_close_matches(text.lower(), names, n=1)
    hint = f"did you mean {near[0]}? " if near else ""
    raise UsageError(f"{flag}: no verdict {text!r}; {hint}verdicts: {', '.join(names)}")


def _expecting(items: list[Candidate], pairs: list[str]) -> list[Candidate]:
    """Each ``ROW=VERDICT`` set on the rows ``ROW`` names (every one of them)."""
    from dataclasses import replace

    wanted: dict[str, str] = {}
    for pair in pairs:
        name, sep, kind = pair.rpartition("=")
        if not sep or not name.strip() or not kind.strip():
            raise UsageError(f"--expect {pair!r}: give ROW=VERDICT, e.g. naive=over-budget")
        named = _rows_named(name.strip(), items)
        if not named:
            labels = ", ".join(c.label for c in items)
            raise UsageError(f"--expect {pair!r}: no compared row is {name.strip()!r} ({labels})")
        for c in named:
            if c.label in wanted:
                raise UsageError(f"--expect: row {c.label!r} is expected twice; keep one")
            wanted[c.label] = verdict_kind(kind.strip())
    return [replace(c, expect=wanted.get(c.label)) for c in items]


def _baseline(requested: str | None, items: list[Candidate]) -> str:
    """The row ratios are taken against: a full label, or a strategy naming one row."""
    labels = [c.label for c in items]
    if requested is None:
        return labels[0]
    if requested in labels:
        return requested
    named = [c.label for c in _rows_named(requested, items)]
    if len(named) == 1:
        return named[0]
    raise UsageError(
        f"--baseline {requested!r} is not one of the compared rows: {', '.join(labels)}"
    )


def _environment(base: Any, device: str) -> dict[str, Any]:
    """The comparison's own keys, from this process: present even if every worker died."""
    from dataclasses import asdict

    from offloadprobe.plan.probe import probe_payload

    emulated = device == "cpu"
    return {
        "device": device,
        "emulated": emulated,
        "emulation_note": "CPU emulation" if emulated else None,
        "payload_bytes": probe_payload(base.model),
        "versions": environment.versions(),
        "machine": environment.machine(),
        "model": asdict(base.model),
        "settings": {"cycles": base.cycles, "train_steps": base.train_steps, "seed": base.seed},
    }
