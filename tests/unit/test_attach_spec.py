"""--phase and --preset: parsing, the packaged presets, and the one-line errors."""

from __future__ import annotations

import importlib

import pytest

from offloadprobe.attach import spec
from offloadprobe.attach.hook import _member
from offloadprobe.core.errors import UsageError


def test_a_phase_names_a_function_or_a_class_method():
    s = spec.parse_phase("offload=verl.utils.megatron_utils:offload_megatron_model_to_cpu")
    assert (s.name, s.module, s.qualname) == (
        "offload",
        "verl.utils.megatron_utils",
        "offload_megatron_model_to_cpu",
    )
    m = spec.parse_phase(" reload = megatron.core.x:_Buffer.reload_from_cpu ")
    assert (m.name, m.module, m.qualname) == (
        "reload",
        "megatron.core.x",
        "_Buffer.reload_from_cpu",
    )
    assert m.target == "megatron.core.x:_Buffer.reload_from_cpu"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("offload", "has no NAME="),
        ("offload=verl.utils", "no MODULE:QUALNAME"),
        ("=m:f", "phase name ''"),
        ("-x=m:f", "phase name '-x'"),
        ("off=m-x:f", "not a dotted Python module path"),
        ("off=m:f.", "not a function name or Class.method"),
        ("off=m:1f", "not a function name or Class.method"),
        ("off=:f", "no MODULE:QUALNAME"),
    ],
)
def test_a_malformed_phase_is_one_line_saying_how_to_fix_it(text, says):
    with pytest.raises(UsageError) as info:
        spec.parse_phase(text)
    message = str(info.value)
    assert says in message
    assert "\n" not in message
    assert info.value.exit_code == 2


def test_presets_are_data_and_each_names_what_the_issue_lists():
    presets = spec.presets()
    assert list(presets) == ["verl-megatron", "megatron-core", "torch-memory-saver", "verl-fsdp"]
    verl = {p.qualname for p in presets["verl-megatron"].phases}
    assert verl == {
        "offload_megatron_model_to_cpu",
        "load_megatron_model_to_gpu",
        "offload_megatron_optimizer",
        "load_megatron_optimizer",
        "offload_megatron_copy_params",
        "load_megatron_copy_params",
    }
    assert {p.module for p in presets["verl-megatron"].phases} == {"verl.utils.megatron_utils"}
    assert {p.qualname for p in presets["torch-memory-saver"].phases} == {
        "TorchMemorySaver.pause",
        "TorchMemorySaver.resume",
    }
    assert all(p.preset == name for name, pre in presets.items() for p in pre.phases)


def test_every_megatron_core_preset_target_exists_in_the_installed_megatron_core():
    for phase in spec.preset("megatron-core").phases:
        owner = importlib.import_module(phase.module)
        *path, name = phase.qualname.split(".")
        for part in path:
            owner = getattr(owner, part)
        raw, _ = _member(owner, name)
        assert callable(raw), phase.target


def test_presets_then_phases_in_order_and_duplicates_refused():
    specs = spec.resolve(["mine=a.b:c"], ["torch-memory-saver"])
    assert [s.name for s in specs] == ["tms_pause", "tms_resume", "mine"]
    with pytest.raises(UsageError, match="given twice"):
        spec.resolve(["x=a:b", "x=a:c"], [])
    with pytest.raises(UsageError, match="named twice"):
        spec.resolve(["x=a:b", "y=a:b"], [])
    with pytest.raises(UsageError, match="is not a preset: choose one of verl-megatron"):
        spec.resolve([], ["verl"])
    assert spec.resolve([], []) == ()  # the job's own offloadprobe.phase blocks alone
