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
