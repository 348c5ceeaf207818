"""A scenario file's every problem at once, each naming the key(s) that fix it; ``[source]``
optional in the user's own scenario; no silent head dimension; and the key reference
(docs/scenario-keys.md) generated from the schema's own definitions. In process: the
loader reads files, nothing runs."""

from __future__ import annotations

import time

import pytest

from offloadprobe.layout.inputs import GptShape
from offloadprobe.scenarios import ScenarioError, ScenarioErrors, keys, load_scenario
from tests.conftest import ROOT
from tests.unit.test_scenario_schema import GOOD

NEW_USER = """
[model]
num_hidden_layers = 94
hidden_size = 4096
num_attention_heads = 64
vocab_size = 151936
num_experts = 128
moe_ffn_hidden_size = 1536

[parallelism]
tp = 4
pp = 8
dp = "2"
gpus_per_node = 8

[offload]
params = true
grads = true

[limit]
host_memory_per_node = 1700

[expect]
naive = "OOM"
lasy = "ok"
"""
"""Seven mistakes in a 20-line file: once reported one per round, six rounds."""


def test_every_problem_of_a_file_is_reported_at_once(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(NEW_USER)
    with pytest.raises(ScenarioErrors) as err:
        load_scenario(path)
    head, *lines = str(err.value).splitlines()
    assert head == f"{path}: 8 problems, fix each:"
    assert [line.split(":")[0].strip() for line in lines] == [
        "model.num_hidden_layers",  # did you mean 'num_layers'?
        "model.num_layers",
        "model.kv_channels",
        "parallelism.dp",
        "offload.optimizer",
        "limit.host_memory_per_node",
        "expect.naive",
        "expect.lasy",
    ]
    assert "did you mean 'num_layers'?" in lines[0] and "did you mean 'lazy'?" in lines[-1]
    assert err.value.exit_code == 2 and err.value.key == "model.num_hidden_layers"


def test_the_cli_prints_them_under_the_files_name_before_anything_runs(
    invoke, fake_runner, tmp_path
):
    path = tmp_path / "mine.toml"
    path.write_text(NEW_USER)
    for verb in ("plan", "repro"):
        start = time.perf_counter()
        result = (
            invoke(verb, str(path), "--device", "cpu")
            if verb == "repro"
            else invoke(verb, str(path))
        )
        assert time.perf_counter() - start < 1.0
        assert result.exit_code == 2 and "Traceback" not in result.stderr
        head, *lines = result.error_lines
        assert head == f"offloadprobe: error: {path}: 8 problems, fix each:"
        assert len(lines) == 8 and all(line.startswith("  ") for line in lines)
    assert fake_runner.configs == []


def test_a_layer_split_names_both_keys_and_the_divisors(tmp_path):
    path = tmp_path / "split.toml"
    path.write_text(
        GOOD.replace("num_layers = 4", "num_layers = 94")
        .replace("pp = 1", "pp = 8")
        .replace("dp = 1", "dp = 1")
        .replace("gpus_per_node = 1", "gpus_per_node = 8")
    )
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(err.value) == (
        f"{path}: [model] num_layers=94 is not divisible by [parallelism] pp=8: set pp to a "
        "divisor of 94 (1, 2, 47, 94) or change num_layers to a multiple of 8 (e.g. 96), or "
        "split the layers unevenly with first_stage_layers and last_stage_layers"
    )


def test_source_is_optional_in_the_users_own_scenario_only(tmp_path):
    path = tmp_path / "private.toml"
    path.write_text(GOOD.replace('[source]\ntitle = "unit test"\n', ""))
    assert load_scenario(path).source is None
    with pytest.raises(ScenarioError) as err:
        load_scenario(path, packaged=True)
    assert err.value.key == "source" and "a scenario shipped with offloadprobe needs it" in (
        err.value.message
    )
    for shipped in (ROOT / "offloadprobe/scenarios/data").glob("*.toml"):
        assert load_scenario(shipped).source is not None, shipped  # found as packaged


def test_no_head_dimension_is_assumed(tmp_path):
    path = tmp_path / "qwen.toml"
    path.write_text(GOOD.replace("kv_channels = 32\n", ""))
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert err.value.key == "model.kv_channels"
    assert "head_dim in its config.json" in err.value.message
    assert "hidden_size / num_attention_heads = 32" in err.value.message
    path.write_text(GOOD.replace("kv_channels = 32\n", "head_dim = 32\n"))
    with pytest.raises(ScenarioError, match="did you mean 'kv_channels'"):
        load_scenario(path)


def test_a_repro_sequence_with_cycles_is_refused(tmp_path):
    path = tmp_path / "seq.toml"
    path.write_text(
        GOOD + '\n[repro]\npayload = "16MiB"\ncycles = 2\nsequence = "double-offload"\n'
    )
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert err.value.message == (
        "[repro] sequence runs its own steps instead of [repro] cycles fixed cycles, so [repro] "
        "cycles would be ignored: drop [repro] cycles (repeat offload,load in [repro] sequence "
        "for more cycles)"
    )


# ------------------------------------------------------------------ the key reference


def test_the_key_reference_is_generated_from_the_schema():
    """After a change to offloadprobe/scenarios/keys.py: python tools/scenario_keys.py."""
    doc = ROOT / "docs" / "scenario-keys.md"
    assert doc.read_text(encoding="utf-8") == keys.markdown()
    assert "(scenario-keys.md)" in (ROOT / "docs" / "scenarios.md").read_text()


def test_the_reference_lists_every_key_the_records_take():
    from offloadprobe.core.options import SCENARIO, keywords

    listed = {k.name for k in keys.SHAPE}
    assert listed == set(GptShape.__annotations__)
    repro = {k.name for k in keys.repro_options()} | set(keys.names("repro"))
    assert repro == keywords(SCENARIO) | {"ranks_per_node"}
    text = keys.markdown()
    for table, (_, rows) in keys.TABLES.items():
        assert f"## `[{table}]`" in text
        assert all(f"| `{k.name}` |" in text for k in rows)


@pytest.mark.parametrize("table", sorted(keys.TABLES))
def test_a_key_the_reference_does_not_list_is_refused(tmp_path, table):
    if table == "expect":  # its own keys are the [[expect]] tables'
        old = '[expect]\nnaive = "oom"\nlazy = "ok"\n'
        new = '[[expect]]\nstrategy = "naive"\noutcome = "oom"\nzzz_unlisted = 1\n'
        text = GOOD.replace(old, new)
    elif f"[{table}]\n" in GOOD:
        text = GOOD.replace(f"[{table}]\n", f"[{table}]\nzzz_unlisted = 1\n")
    else:
        text = (
            GOOD + f"\n[{table}]\nzzz_unlisted = 1\n" + ('payload = "16MiB"\n' * (table == "repro"))
        )
    path = tmp_path / "extra.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert "unknown key 'zzz_unlisted'" in err.value.message, str(err.value)
