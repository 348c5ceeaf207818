"""The one option model (core.options): every configurable field is declared once, and
run, compare, plan, the pytest plugin and the scenario's [repro] table all derive from it."""

from __future__ import annotations

import dataclasses

import pytest

from offloadprobe.core import options as opts
from offloadprobe.core.config import RunConfig


def _config_fields() -> set[str]:
    """Every field a run's configuration has: RunConfig's own, and its sections' as
    ``section.field``."""
    found = set()
    for f in dataclasses.fields(RunConfig):
        if f.name in ("model", "optimizer", "parallel"):
            section = {
                "model": "ModelConfig",
                "optimizer": "OptimizerChoice",
                "parallel": "ParallelConfig",
            }[f.name]
            import offloadprobe.core.config as config

            found |= {f"{f.name}.{g.name}" for g in dataclasses.fields(getattr(config, section))}
        else:
            found.add(f.name)
    return found


# Fields a flag cannot set on purpose: the optimizer's hyperparameters are the probe
# model's (not the user's question), and these are set by each verb itself.
FIXED = {
    "optimizer.lr",
    "optimizer.weight_decay",
    "optimizer.adam_beta1",
    "optimizer.adam_beta2",
    "optimizer.adam_eps",
    "optimizer.clip_grad",
}


def test_every_configuration_field_has_an_option_or_a_reason():
    targets = {o.target for o in opts.OPTIONS if o.target}
    missing = _config_fields() - targets - opts.NOT_OPTIONS - FIXED
    assert not missing, f"fields without an option: {sorted(missing)}"
    assert not targets - _config_fields(), "an option targets a field that does not exist"


def _flags(verb: str) -> set[str]:
    from offloadprobe.cli import _command, _register

    _register([verb])
    command = _command().commands[verb]
    return {name for p in command.params for name in getattr(p, "opts", [])}


@pytest.mark.parametrize("verb", [opts.RUN, opts.COMPARE, opts.PLAN])
def test_each_verb_has_exactly_its_options_flags(verb):
    flags = _flags(verb)
    for option in opts.for_verb(verb):
        assert option.cli_flag in flags, (verb, option.name)
    for option in opts.OPTIONS:
        if verb not in option.verbs:
            assert option.cli_flag not in flags, (verb, option.name)


def test_the_plugin_takes_every_plugin_option_by_name():
    from offloadprobe.pytest_plugin.plugin import keywords

    assert opts.keywords(opts.PLUGIN) <= keywords()
    assert {"strategy", "optimizer_strategy", "tp", "num_experts", "nproc_per_node"} <= keywords()


def test_scenario_repro_keys_are_the_options_scenario_keys(tmp_path):
    from offloadprobe.scenarios.schema import ScenarioError, load_scenario
    from tests.conftest import ROOT

    text = (ROOT / "scenarios/ci-small.toml").read_text()
    good = tmp_path / "good.toml"
    good.write_text(text.replace("[repro]\n", "[repro]\nseed = 7\ntrain_steps = 2\n"))
    assert load_scenario(good).repro.options == {"seed": 7, "train_steps": 2}
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("[repro]\n", "[repro]\nsede = 7\n"))
    with pytest.raises(ScenarioError) as err:
        load_scenario(bad)
    assert "seed" in err.value.message  # the nearest scenario key


def test_build_config_sets_every_target():
    config = opts.build_config(
        {
            "layers": 3,
            "precision_aware": True,
            "exp_avg_dtype": "bf16",
            "tp": 2,
            "rollout_claim": "1GiB",
            "strategy_option": ["threads=3"],
        },
        strategy="naive",
        optimizer_strategy="fixed",
        label="mine",
    )
    assert config.model.num_layers == 3 and config.optimizer.exp_avg_dtype == "bf16"
    assert config.parallel.tp == 2 and config.rollout_claim_bytes == 2**30
    assert config.strategy_options == {"threads": "3"} and config.label == "mine"


def test_run_help_names_every_registered_strategy_and_the_user_forms(invoke):
    from offloadprobe.engine.optimizer.strategies import OPTIMIZER_STRATEGIES
    from offloadprobe.engine.strategies import MODEL_STRATEGIES

    text = " ".join(invoke("run", "--help", columns=400).stdout.split())
    for name in [*MODEL_STRATEGIES.names(), *OPTIMIZER_STRATEGIES.names()]:
        assert name in text
    assert "package.module:object" in text and "package.module:offload_fn,load_fn" in text
