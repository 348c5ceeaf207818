"""Every registered strategy in one line: its name and what it does, from its descriptor.

``offloadprobe strategies`` prints these lines and docs/strategies.md shows them as a
table (``tools/figures.py`` writes it), so the list and the docs come from the registries
and cannot drift. Reading a descriptor imports no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.text import Text

from offloadprobe.core.registry import USER_FORMS
from offloadprobe.report.tables import Left, column_table


@dataclass(frozen=True, kw_only=True, slots=True)
class StrategyLine:
    """One strategy: which kind, the flag that takes it, its name and its summary."""

    kind: str
    """``parameters`` or ``optimizer state``: what the strategy moves."""
    flag: str
    name: str
    summary: str
    engines: str = "any engine"
    """The engines it serves (``--engine``), in words: ``megatron``, ``fsdp2``, ``any engine``."""


def strategy_lines() -> list[StrategyLine]:
    """Every registered strategy, parameter strategies first, in the registries' order."""
    from offloadprobe.engine.optimizer.strategies import FLAG as OPTIMIZER_FLAG
    from offloadprobe.engine.optimizer.strategies import OPTIMIZER_STRATEGIES
    from offloadprobe.engine.strategies import FLAG as MODEL_FLAG
    from offloadprobe.engine.strategies import MODEL_STRATEGIES

    kinds = (
        ("parameters", MODEL_FLAG, MODEL_STRATEGIES),
        ("optimizer state", OPTIMIZER_FLAG, OPTIMIZER_STRATEGIES),
    )
    return [
        StrategyLine(
            kind=kind,
            flag=flag,
            name=name,
            summary=str(registry.get(name).summary),
            engines=", ".join(registry.get(name).engines) or "any engine",
        )
        for kind, flag, registry in kinds
        for name in registry.names()
    ]


def strategy_table(lines: Sequence[StrategyLine]) -> RenderableType:
    """One table per kind and engine, a line per strategy, and the forms that name your own
    code."""
    parts: list[RenderableType] = []
    for kind, engines in dict.fromkeys((line.kind, line.engines) for line in lines):
        mine = [line for line in lines if (line.kind, line.engines) == (kind, engines)]
        columns = [Left("name", lambda s: s.name), Left("what it does", lambda s: s.summary)]
        title = f"{kind} ({engines}): {mine[0].flag} NAME"
        parts += [column_table(columns, mine, title=title), Text("")]
    parts.append(Text("your own code, after either flag:"))
    parts += [Text(f"  {form}") for form in USER_FORMS]
    return Group(*parts)


def strategy_markdown(lines: Sequence[StrategyLine]) -> list[str]:
    """The same lines as one Markdown table, for docs/strategies.md."""
    out = ["| strategy | flag | engine | what it does |", "|---|---|---|---|"]
    out += [f"| `{s.name}` | `{s.flag}` | {s.engines} | {s.summary} |" for s in lines]
    return out
