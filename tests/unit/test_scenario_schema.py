"""Scenario files: every shipped one loads and agrees with the accounting; bad input
names the key and says how to fix it."""

from __future__ import annotations

from pathlib import Path

import pytest

from offloadprobe.core.errors import UsageError
from offloadprobe.layout.inputs import GptShape
from offloadprobe.plan.projection import host_peak_per_node, predicted
from offloadprobe.scenarios import ScenarioError, load_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
GiB = 2**30

SHIPPED = sorted(p.name for p in SCENARIOS.glob("*.toml"))


def test_the_three_scenarios_ship() -> None:
    assert {"verl-6193-pinned-peak.toml", "verl-6635-master-param.toml", "ci-small.toml"} <= set(
        SHIPPED
    )


@pytest.mark.parametrize("name", SHIPPED)
def test_scenario_loads_and_matches_the_accounting(name: str) -> None:
    scenario = load_scenario(SCENARIOS / name)
    assert scenario.expect
    assert scenario.source.title
    for e in scenario.expect:
        assert predicted(scenario, e.strategy) == e.outcome, e.strategy


def test_verl_6193_numbers_in_the_comments() -> None:
    s = load_scenario(SCENARIOS / "verl-6193-pinned-peak.toml")
    assert isinstance(s.model.spec, GptShape)
    assert (s.parallelism.tp, s.parallelism.pp, s.parallelism.ep, s.parallelism.dp) == (4, 8, 4, 2)
    reserved = s.limit.host_reserved_per_node
    rounded = {
        k: round((host_peak_per_node(s, k, "complete") - reserved) / GiB, 1)
        for k in ("naive", "lazy", "registered", "pageable")
    }
    assert rounded == {"naive": 705.8, "lazy": 465.8, "registered": 445.1, "pageable": 445.1}


def test_ci_small_limit_sits_between_lazy_and_naive() -> None:
    s = load_scenario(SCENARIOS / "ci-small.toml")
    limit = s.limit.host_memory_per_node
    assert s.repro is not None and limit is not None
    payload = s.layout().stages[0].param_bytes
    assert 48 * 2**20 <= s.repro.payload <= 64 * 2**20
    lazy, naive = (host_peak_per_node(s, k, "none") for k in ("lazy", "naive"))
    assert lazy < limit < naive
    # CPU emulation pins nothing; `offloadprobe run --device cpu` measured lazy 1.00x and
    # naive 1.99x (cycle 0) to 3.00x of the payload: the budget separates those too
    assert payload < limit < 1.9 * payload


# ------------------------------------------------------------ bad input

GOOD = """
[model]
num_layers = 4
hidden_size = 512
num_attention_heads = 16
kv_channels = 32
vocab_size = 16256
ffn_hidden_size = 2048

[parallelism]
tp = 1
pp = 1
dp = 1
gpus_per_node = 1

[offload]
params = true
grads = true
optimizer = false

[limit]
host_memory_per_node = "88MiB"

[expect]
naive = "oom"
lazy = "ok"

[source]
title = "unit test"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text, encoding="utf-8")
    return path


def edit(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new)


def error_for(tmp_path: Path, text: str) -> ScenarioError:
    with pytest.raises(ScenarioError) as err:
        load_scenario(write(tmp_path, text))
    return err.value


def test_good_minimal_scenario(tmp_path: Path) -> None:
    s = load_scenario(write(tmp_path, GOOD))
    assert s.limit.host_memory_per_node == 88 * 2**20
    assert [(e.strategy, e.outcome, e.kind) for e in s.expect] == [
        ("naive", "oom", "params"),
        ("lazy", "ok", "params"),
    ]
    assert s.expected("lazy") == "ok" and s.expected("pageable") is None
    assert s.repro is None and s.ddp.grad_reduce_in_fp32


def test_error_is_a_usage_error_with_path(tmp_path: Path) -> None:
    err = error_for(tmp_path, edit("tp = 1", "tp = 1\ntensor_parallel = 2"))
    assert isinstance(err, UsageError) and err.exit_code == 2
    assert err.path == tmp_path / "s.toml"
    assert str(err).startswith(f"{tmp_path / 's.toml'}: parallelism.tensor_parallel: ")


@pytest.mark.parametrize(
    ("old", "new", "key", "hint"),
    [
        (
            "tp = 1",
            "tp = 1\ntensor_model_parallel_size = 2",
            "parallelism.tensor_model_parallel_size",
            "did you mean 'tp'?",
        ),
        ("vocab_size = 16256", "vocab_sise = 16256", "model.vocab_sise", "'vocab_size'"),
        (
            "num_attention_heads = 16",
            "num_attention_heads = 16\nnum_key_value_heads = 4",
            "model.num_key_value_heads",
            "'num_query_groups'",
        ),
        ('lazy = "ok"', 'lazzy = "ok"', "expect.lazzy", "'lazy'"),
        ("[source]", "[sources]", "sources", "'source'"),
        ("optimizer = false", "optimizer = false\nzzz = 1", "offload.zzz", "valid keys: params"),
    ],
)
def test_unknown_key_names_the_nearest(
    tmp_path: Path, old: str, new: str, key: str, hint: str
) -> None:
    err = error_for(tmp_path, edit(old, new))
    assert err.key == key
    assert "unknown key" in err.message and hint in err.message


@pytest.mark.parametrize(
    ("old", "new", "key", "fix"),
    [
        ("tp = 1", 'tp = "1"', "parallelism.tp", "expected an integer, got string '1'"),
        ("tp = 1", "tp = true", "parallelism.tp", "tp = 4"),
        ("params = true", 'params = "yes"', "offload.params", "params = true"),
        ('title = "unit test"', "title = 3", "source.title", 'title = "text"'),
        (
            'host_memory_per_node = "88MiB"',
            "host_memory_per_node = 8.5",
            "limit.host_memory_per_node",
            '"1700GiB"',
        ),
        ("num_layers = 4", "num_layers = 4.0", "model.num_layers", "expected an integer"),
    ],
)
def test_wrong_type(tmp_path: Path, old: str, new: str, key: str, fix: str) -> None:
    err = error_for(tmp_path, edit(old, new))
    assert err.key == key and fix in err.message


@pytest.mark.parametrize("size", ['"88 parsecs"', '"-5GiB"', '"GiB"', '""'])
def test_bad_size_string(tmp_path: Path, size: str) -> None:
    err = error_for(tmp_path, edit('"88MiB"', size))
    assert err.key == "limit.host_memory_per_node"
    assert "512MiB" in err.message or "1700GiB" in err.message


@pytest.mark.parametrize(
    ("old", "new", "key", "words"),
    [
        (
            "tp = 1",
            "tp = 3",
            "model.num_attention_heads",
            "[model] num_attention_heads=16 is not divisible by [parallelism] tp=3: set tp to "
            "a divisor of 16 (1, 2, 4, 8, 16) or change num_attention_heads to a multiple of 3",
        ),
        ("tp = 1", "tp = 5", "model.num_attention_heads", "set tp to a divisor of 16"),
        ("dp = 1", "dp = 1\nep = 2", "parallelism.ep", "lower ep or raise dp"),
        (
            "gpus_per_node = 1",
            "gpus_per_node = 8",
            "parallelism.gpus_per_node",
            "multiple of gpus_per_node",
        ),
        (
            "pp = 1",
            "pp = 3",
            "parallelism.pp",
            "[model] num_layers=4 is not divisible by [parallelism] pp=3: set pp to a divisor "
            "of 4 (1, 2, 4) or change num_layers to a multiple of 3 (e.g. 6), or split the "
            "layers unevenly with first_stage_layers and last_stage_layers",
        ),
        (
            "gpus_per_node = 1",
            "gpus_per_node = 1\nnodes = 2",
            "parallelism.nodes",
            "make dp = nodes*gpus_per_node / (tp*pp)",
        ),
        ("tp = 1", "tp = 0", "parallelism.tp", "positive"),
        (
            "ffn_hidden_size = 2048",
            "ffn_hidden_size = 2048\nnum_experts = 6\n"
            "moe_ffn_hidden_size = 64\nnum_dense_layers = 1",
            "model.num_experts",
            "num_experts=6 is not divisible by [parallelism] ep=4",
        ),
    ],
)
def test_impossible_parallelism(tmp_path: Path, old: str, new: str, key: str, words: str) -> None:
    text = edit(old, new)
    if key == "model.num_experts":
        text = text.replace("dp = 1", "dp = 4\nep = 4").replace(
            "gpus_per_node = 1", "gpus_per_node = 4"
        )
    err = error_for(tmp_path, text)
    assert err.key == key and words in err.message


@pytest.mark.parametrize(
    ("old", "new", "key", "words"),
    [
        ('naive = "oom"', 'naive = "crash"', "expect.naive", "use one of oom, ok"),
        ('naive = "oom"', 'naive = "om"', "expect.naive", "did you mean 'oom'?"),
        ('naive = "oom"', 'naive = "OOM"', "expect.naive", "did you mean 'oom'?"),
        (
            "num_layers = 4",
            'num_layers = 4\nnormalization = "rmsnorm"',
            "model.normalization",
            "did you mean 'RMSNorm'?",
        ),
        (
            '[limit]\nhost_memory_per_node = "88MiB"',
            "[limit]",
            "limit.host_memory_per_node",
            "set host_memory_per_node or gpu_memory_per_device",
        ),
        ("num_layers = 4\n", "", "model.num_layers", "missing"),
        ("[model]", "[model]\nparams = 1000", "model.num_layers", "not both"),
        (
            "optimizer = false",
            'optimizer = false\nexp_avg_dtype = "bfloat16"',
            "offload.precision_aware",
            "set it to true",
        ),
        (
            "optimizer = false",
            'optimizer = false\nexp_avg_dtype = "bf16"',
            "offload.exp_avg_dtype",
            "'bfloat16'",
        ),
    ],
)
def test_bad_values(tmp_path: Path, old: str, new: str, key: str, words: str) -> None:
    err = error_for(tmp_path, edit(old, new))
    assert err.key == key and words in err.message


def test_missing_table_and_bad_toml(tmp_path: Path) -> None:
    err = error_for(
        tmp_path, edit("[offload]\nparams = true\ngrads = true\noptimizer = false\n", "")
    )
    assert err.key == "offload" and "missing [offload] table; add it, e.g. [offload] params" in (
        err.message
    )
    err = error_for(tmp_path, GOOD + "\n[limit\n")
    assert err.key == "<file>" and "not valid TOML" in err.message
    with pytest.raises(ScenarioError) as missing:
        load_scenario(tmp_path / "missing.toml")
    assert missing.value.key == "<file>" and "cannot read it" in missing.value.message


def test_expect_as_array_of_tables(tmp_path: Path) -> None:
    text = edit(
        '[expect]\nnaive = "oom"\nlazy = "ok"\n',
        '[[expect]]\nstrategy = "naive"\noutcome = "oom"\nnote = "2x peak"\n'
        '[[expect]]\nstrategy = "legacy"\noutcome = "ok"\n',
    )
    s = load_scenario(write(tmp_path, text))
    assert [(e.strategy, e.kind, e.note) for e in s.expect] == [
        ("naive", "params", "2x peak"),
        ("legacy", "optimizer", None),
    ]
    err = error_for(tmp_path, text.replace('strategy = "legacy"', 'strategy = "naive"'))
    assert err.key == "expect[1].outcome" and "twice" in err.message
    err = error_for(tmp_path, text.replace('strategy = "legacy"', 'strategy = "legasy"'))
    assert err.key == "expect[1].strategy" and "'legacy'" in err.message


def test_param_count_model_and_repro(tmp_path: Path) -> None:
    text = (
        GOOD.replace(
            "[model]\nnum_layers = 4\nhidden_size = 512\nnum_attention_heads = 16\n"
            "kv_channels = 32\nvocab_size = 16256\nffn_hidden_size = 2048\n",
            "[model]\nparams = 30_000_000\nexpert_params = 10_000_000\n",
        )
        + '\n[repro]\npayload = "56MiB"\ncycles = 2\n'
    )
    s = load_scenario(write(tmp_path, text))
    assert s.repro is not None and (s.repro.payload, s.repro.cycles) == (56 * 2**20, 2)
    err = error_for(tmp_path, text.replace("cycles = 2", "cycles = 0"))
    assert err.key == "repro.cycles"
    err = error_for(
        tmp_path, text.replace("expert_params = 10_000_000", "expert_params = 40_000_000")
    )
    assert err.key == "model.expert_params"


def test_expectations_name_the_users_own_code(tmp_path: Path) -> None:
    """A user's object, function pair and ``@each`` optimizer pair are expectations like any
    registered name: a parameter strategy unless prefixed ``optimizer.``."""
    pair = "myjob.offload:offload_model,load_model"
    optimizer = "myjob.offload:offload_optimizer,load_optimizer@each"
    text = edit(
        'lazy = "ok"',
        f'lazy = "ok"\n"{pair}" = "oom"\n"optimizer.{optimizer}" = "ok"\n'
        '"myjob.offload:ParamOffload" = "ok"',
    )
    s = load_scenario(write(tmp_path, text))
    assert [(e.strategy, e.outcome, e.kind) for e in s.expect][2:] == [
        (pair, "oom", "params"),
        (optimizer, "ok", "optimizer"),
        ("myjob.offload:ParamOffload", "ok", "params"),
    ]
    assert s.expected(pair) == "oom"


def test_repro_options_take_a_sequence_and_the_model_parts(tmp_path: Path) -> None:
    text = GOOD + (
        '\n[repro]\npayload = "16MiB"\nsequence = "double-offload"\nref_model = true\n'
        'frozen_fraction = 0.5\nworkspace_cache = "8MiB"\n'
    )
    s = load_scenario(write(tmp_path, text))
    assert s.repro is not None
    assert s.repro.options == {
        "sequence": "double-offload",
        "ref_model": True,
        "frozen_fraction": 0.5,
        "workspace_cache": "8MiB",
    }
