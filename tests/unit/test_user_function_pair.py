"""``package.module:offload_fn,load_fn[@each]``: a framework's functions used as they are."""

import sys
import textwrap

import pytest

from offloadprobe.core.errors import StrategyError
from offloadprobe.engine.strategies.user import FunctionPair, load_object

NEEDS = ("offload", "load")


@pytest.fixture
def framework(tmp_path, monkeypatch):
    """A module named ``fw_funcs`` recording how its functions are called."""
    (tmp_path / "fw_funcs.py").write_text(
        textwrap.dedent("""
        calls = []

        def offload_models(models):
            calls.append(("offload", models))

        def load_models(models, load_grad=True):
            calls.append(("load", models, load_grad))

        def offload_one(optimizer):
            calls.append(("offload_one", optimizer))

        def load_one(optimizer):
            calls.append(("load_one", optimizer))

        not_a_function = 3
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield sys.modules.get("fw_funcs") or __import__("fw_funcs")
    sys.modules.pop("fw_funcs", None)


def test_list_convention_calls_each_function_once_with_the_list(framework):
    pair = load_object("fw_funcs:offload_models,load_models", flag="--strategy", needs=NEEDS)
    pair.offload(["chunk0", "chunk1"])
    pair.load(["chunk0", "chunk1"])
    assert framework.calls == [
        ("offload", ["chunk0", "chunk1"]),
        ("load", ["chunk0", "chunk1"], True),
    ]


def test_each_convention_calls_once_per_item(framework):
    pair = load_object("fw_funcs:offload_one,load_one@each", flag="--x", needs=NEEDS)
    assert isinstance(pair, FunctionPair) and pair.each
    pair.offload(["chained"])
    pair.load(["chained"])
    assert framework.calls == [("offload_one", "chained"), ("load_one", "chained")]


def test_literal_keyword_arguments_are_bound(framework):
    spec = "fw_funcs:offload_models, load_models(load_grad=False)"
    load_object(spec, flag="--strategy", needs=NEEDS).load(["c"])
    assert framework.calls == [("load", ["c"], False)]


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("fw_funcs:offload_models,load_models,extra", "give two functions"),
        ("fw_funcs:offload_models,missing", "has no attribute 'missing'"),
        ("fw_funcs:offload_models,not_a_function", "is not callable"),
        ("fw_funcs:offload_models,load_models(True)", "keyword=literal"),
        ("fw_funcs:offload_models,load_models(load_grad=open)", "keyword=literal"),
        ("fw_funcs:offload_models,load_models@all", "give two functions"),
        ("no_such_module_xyz:a,b", "cannot import"),
    ],
)
def test_bad_pair_specs_are_usage_errors(framework, spec, says):
    with pytest.raises(StrategyError, match=says) as err:
        load_object(spec, flag="--strategy", needs=NEEDS)
    assert err.value.exit_code == 2
    assert "\n" not in str(err.value)
