"""Help and errors name every registered strategy and the user's forms; a near miss gets
"did you mean", of either kind. In-process, nothing runs (the names fail first)."""

from __future__ import annotations

import pytest

from offloadprobe.core.registry import USER_FORMS
from offloadprobe.engine.optimizer.strategies import OPTIMIZER_STRATEGIES
from offloadprobe.engine.strategies import MODEL_STRATEGIES


def _words(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("verb", ["run", "compare"])
def test_help_lists_every_strategy_and_the_user_forms(invoke, verb):
    result = invoke(verb, "--help", columns=80)
    assert result.exit_code == 0
    text = _words(result.stdout)
    for registry in (MODEL_STRATEGIES, OPTIMIZER_STRATEGIES):
        assert registry.choices() in text  # every name, in order, then the user's forms
    assert all(form in text for form in USER_FORMS)
    assert len(MODEL_STRATEGIES.names()) >= 8 and len(OPTIMIZER_STRATEGIES.names()) >= 5


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["run", "--strategy", "lazzy"], "(did you mean 'lazy'?)"),
        (["run", "--strategy", "legasy"], "did you mean 'legacy'? it is an optimizer strategy: "),
        (["run", "--optimizer-strategy", "fixd"], "(did you mean 'fixed'?)"),
        (["compare", "naive", "legacy"], "'legacy' is an optimizer strategy"),
        (["compare", "naive", "--optimizer-strategy", "lazy"], "model strategy: compare lazy"),
    ],
)
def test_a_near_miss_is_one_line_exit_2_with_every_name(invoke, args, says):
    result = invoke(*args, "--device", "cpu")
    assert result.exit_code == 2
    (line,) = result.error_lines
    assert line.startswith("offloadprobe: error: unknown ") and says in line
    registry = OPTIMIZER_STRATEGIES if "optimizer strategy '" in line else MODEL_STRATEGIES
    assert line.endswith(f"choose one of {registry.choices()}")


def test_strategies_lists_each_on_one_line_at_80_columns_without_colour(invoke):
    """GIVEN the registries WHEN ``offloadprobe strategies`` runs piped at 80 columns THEN
    every registered name starts exactly one line, its descriptor's summary on that same
    line, nothing is wider than 80 columns and no colour code is printed."""
    result = invoke("strategies", columns=80)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert "\x1b[" not in result.stdout
    assert max(len(line.rstrip()) for line in lines) <= 80
    for registry in (MODEL_STRATEGIES, OPTIMIZER_STRATEGIES):
        for name in registry.names():
            summary = registry.get(name).summary
            rows = [line for line in lines if line.split()[:1] == [name] and summary in line]
            assert rows, f"{name}: {summary!r} is not on one line"
    assert "--strategy NAME" in result.stdout and "--optimizer-strategy NAME" in result.stdout
    assert all(form in result.stdout for form in USER_FORMS)
