"""Rich output of ``offloadprobe repro``, rendered from its ``Repro`` record only.

The outcome table keeps to one line per strategy (expected, observed, match); what each
scaled run did, in words, follows the table as one line per strategy.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, RenderableType
from rich.text import Text

from offloadprobe.core.units import format_bytes
from offloadprobe.report.tables import Column, Left, column_table
from offloadprobe.report.terms import terms_table
from offloadprobe.repro.records import Repro, ReproOutcome


def _upper_oom(value: str) -> str:
    return "OOM" if value == "oom" else value


OUTCOME_COLUMNS: list[Column[ReproOutcome]] = [
    Left("strategy", lambda o: o.strategy),
    Left("kind", lambda o: o.kind),
    Left("expected", lambda o: _upper_oom(o.expected)),
    Left("observed", lambda o: _upper_oom(o.observed)),
    Left("match", lambda o: "yes" if o.matches else "NO"),
]


def outcome_table(repro: Repro) -> RenderableType:
    """One row per strategy: what the scenario expects, what the scaled run did."""
    return column_table(
        OUTCOME_COLUMNS,
        repro.outcomes,
        title=f"{repro.scenario}: reproduced on {repro.device}",
        style=lambda o: None if o.matches else "red",
    )


def model_words(model: dict[str, Any]) -> str:
    """The probe model in words: ``4 layers, hidden 512, 16 heads, vocab 15360`` and what it
    has besides (experts, a reference model, frozen parameters, a workspace cache)."""
    parts = [
        f"{model[key]} {word}" if word != "hidden" else f"hidden {model[key]}"
        for key, word in (
            ("num_layers", "layers"),
            ("hidden_size", "hidden"),
            ("num_attention_heads", "heads"),
        )
        if key in model
    ]
    if "vocab_size" in model:
        parts.append(f"vocab {model['vocab_size']}")
    if model.get("num_experts"):
        parts.append(f"{model['num_experts']} experts (top {model.get('moe_router_topk')})")
    if model.get("ref_model"):
        parts.append("a reference model")
    if model.get("frozen_fraction"):
        parts.append(f"{model['frozen_fraction']:g} of it frozen")
    if model.get("workspace_cache_bytes"):
        parts.append(f"a {format_bytes(model['workspace_cache_bytes'])} workspace cache")
    return ", ".join(parts) or "the default probe"


def render_repro(repro: Repro, console: Console) -> None:
    """The scenario, the probe model and the warnings said before it ran; the scaling,
    every child's arithmetic, the outcomes, the method and notes."""
    console.print(Text(f"scenario {repro.path}; probe model: {model_words(repro.model)}"))
    for line in repro.warnings:
        console.print(Text(f"warning: {line}", style="yellow"))
    console.print(Text(repro.scale))
    if repro.host_terms:
        console.print(terms_table("host limit, scaled to one process", repro.host_terms))
    if repro.gpu_terms:
        console.print(terms_table("GPU headroom, scaled to one process", repro.gpu_terms))
    for o in repro.outcomes:
        if o.terms:
            console.print(terms_table(f"{o.strategy}: {o.observed}", o.terms))
    console.print(outcome_table(repro))
    for o in repro.outcomes:
        console.print(Text(f"{o.strategy}: {o.detail}", style=None if o.matches else "red"))
    methods: dict[str, list[str]] = {}
    for o in repro.outcomes:
        methods.setdefault(o.method, []).append(o.strategy)
    for method, names in methods.items():
        console.print(Text(f"method ({', '.join(names)}): {method}"))
    for o in repro.outcomes:
        if o.observed == "error" and o.stderr_tail:
            console.print(Text(f"{o.strategy} stderr: {o.stderr_tail}"))
    for note in repro.notes:
        console.print(Text(note))
