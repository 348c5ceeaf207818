"""The engine in a run's identity: one registry, ``--engine`` on every verb, refused names
and strategies that serve another engine up front (exit 2, one line), the engine in the
row label where it is not the default, so rows of two engines never match."""

from __future__ import annotations

import pytest

from offloadprobe.core.engines import ENGINES, EngineInfo
from offloadprobe.core.errors import StrategyError, UsageError
from offloadprobe.core.records import row_label
from tests.unit.test_up_front import CPU, refused


@pytest.fixture
def toy():
    """The tests' second engine, registered as a built-in would be, for one test."""
    ENGINES.register_module("toy", "tests.toy_engine")
    yield ENGINES.get("toy")
    ENGINES._modules.pop("toy")
    ENGINES._loaded.pop("toy", None)


def test_megatron_is_the_default_and_a_name_is_registered_once():
    assert ENGINES.names()[0] == "megatron" and ENGINES.get("megatron").default
    with pytest.raises(StrategyError, match="registered twice"):
        ENGINES.register_module("megatron", "tests.toy_engine")


def test_an_entry_point_must_name_a_descriptor_of_its_own_name():
    adapt = ENGINES._adapt
    with pytest.raises(UsageError, match=r"must name an offloadprobe\.core\.engines\.EngineInfo"):
        adapt("mine", object())
    info = EngineInfo(name="other", summary="s", factory="m:f")
    with pytest.raises(UsageError, match="its descriptor is named 'other'"):
        adapt("mine", info)


@pytest.mark.parametrize("verb", [("run",), ("compare", "lazy"), ("plan", "--probe")])
def test_an_unknown_engine_is_refused_with_the_names(invoke, fake_runner, verb):
    line = refused(invoke, fake_runner, *verb, "--engine", "nosuch", *CPU)
    assert "unknown engine 'nosuch' (did you mean one of megatron" in line, line
    line = refused(invoke, fake_runner, *verb, "--engine", "megatorn", *CPU)
    assert "did you mean 'megatron'?" in line, line


def test_help_lists_the_engines(invoke, toy):
    out = invoke("run", "--help").stdout
    assert "--engine" in out and "megatron" in out


def test_a_strategy_of_another_engine_is_refused_naming_the_engines_own(invoke, fake_runner, toy):
    line = refused(invoke, fake_runner, "run", "--engine", "toy", "--strategy", "naive", *CPU)
    assert "model strategy 'naive' does not serve engine 'toy'" in line, line
    assert "your own package.module:object" in line, line
    from offloadprobe.cli.strategies import check_served

    with pytest.raises(UsageError, match="optimizer strategy 'legacy' does not serve engine 'toy'"):
        check_served("toy", ["mine.offload:offload,load"], ["legacy"])  # the user's: any engine


def test_the_default_engine_runs_as_before(invoke, fake_runner):
    assert invoke("run", "--strategy", "lazy", *CPU).exit_code == 0
    assert fake_runner.last.engine == "megatron"


def test_the_label_names_an_engine_that_is_not_the_default():
    assert row_label("lazy", "none") == "lazy + none"
    assert row_label("lazy", "none", "megatron") == "lazy + none"
    assert row_label("lazy", None, "fsdp2") == "lazy + none [fsdp2]"
    assert row_label("lazy", "none", "fsdp2", name="mine") == "mine"
