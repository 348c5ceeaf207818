"""What the marker's keywords are checked for before its worker starts, as the command line
checks its flags (torch-free, at collection): keywords that cancel each other out
(``core.option_conflicts``), each strategy (a user's read from its source, not run:
``engine.strategies.user_calls``), and a stored run's payload against the model's."""

from __future__ import annotations

from typing import Any

from offloadprobe.core.errors import UsageError
from offloadprobe.core.records import row_label


def check_up_front(options: dict[str, Any]) -> None:
    """``UsageError`` (in the marker's words) for keywords that cancel each other out or a
    strategy that cannot be called as offloadprobe calls it."""
    from offloadprobe.cli.strategies import check_strategies
    from offloadprobe.core.option_conflicts import check_given

    check_given(options, options, spell=lambda name: f"{name}=")
    model, optimizer = options.get("strategy", "lazy"), options.get("optimizer_strategy", "none")
    try:
        engine = str(options.get("engine", "megatron"))
        check_strategies([str(model)], [str(optimizer)], load=False, engine=engine)
    except UsageError as exc:
        words = str(exc).replace("--optimizer-strategy ", "optimizer_strategy=")
        raise UsageError(words.replace("--strategy ", "strategy=")) from None


def check_stored_payload(budgets: list[Any], config: Any) -> None:
    """``UsageError`` when ``baseline_json`` stored this row for another model."""
    from offloadprobe.cli.budget_report import row_payload
    from offloadprobe.core.regression import check_payloads

    label = row_label(config.strategy, config.optimizer_strategy, config.engine)
    check_payloads(budgets, {label: row_payload(config)})
