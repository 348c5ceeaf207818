"""Model parts outside the DDP buffers (``--ref-model``, ``--frozen-fraction``): strategies
receive them in the chunk list after the DDP chunks; the built-in ones move every part
bit for bit (and an offload or a load repeated moves no part again), code that moves only
the DDP buffers leaves the parts on the device (not offloaded, exit 1), and a part that
comes back changed is corrupted, the frozen parameters as the modules hold them after the
load (another ``nn.Parameter`` put in a module is the one checked). In process, CPU
emulation, the smallest tiny model: verdicts and bytes, not host magnitudes."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from offloadprobe.engine.model import parts
from offloadprobe.engine.strategies import MODEL_STRATEGIES
from tests.conftest import TINY, with_flags

SMALLEST = with_flags(TINY, hidden="128", vocab="512")
PARTS = ["--ref-model", "--frozen-fraction", "0.5", "--no-progress"]
HERE = "tests.integration.parts_functions:"
SWAP = "tests.integration.frozen_swap_strategies:"


def _run(invoke, tmp_path, *args: str, reference_check: bool = False):
    out = tmp_path / "run.json"
    model = with_flags(SMALLEST, reference_check=reference_check)
    result = invoke("run", *model, *PARTS, *args, "--json", str(out))
    (run,) = json.loads(out.read_text())["runs"]
    return result, run


NO_TMS = (
    "tms pauses CUDA virtual memory through torch_memory_saver "
    f"({'installed' if importlib.util.find_spec('torch_memory_saver') else 'not installed'}): "
    "CPU emulation exits 2; its parts are tests/unit/test_tms_strategy.py and, on a GPU, "
    "benchmarks/h200_strategies.sh parts"
)


def _moving_built_ins():
    """Every built-in megatron strategy that moves parameters (``none`` keeps them on
    purpose; FSDP2's strategies move a ``fully_shard``'ed model's, tests/integration/
    test_fsdp2_*)."""
    for name in MODEL_STRATEGIES.builtin_names():
        info = MODEL_STRATEGIES.get(name)
        if not info.moves_params or not info.serves("megatron"):
            continue
        marks = [pytest.mark.skip(reason=NO_TMS)] if name == "tms" else []
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("strategy", list(_moving_built_ins()))
def test_built_in_strategies_move_every_part_bit_for_bit(invoke, tmp_path, strategy):
    args = ("--strategy", strategy, "--optimizer-strategy", "complete")
    result, run = _run(invoke, tmp_path, *args, reference_check=True)
    assert result.exit_code == 0, result.stdout
    assert run["outcome"]["kind"] == "ok" and not run["integrity"]
    parts = run["part_bytes"]
    # about half the policy frozen (whole parameters, so a little more), and a reference
    # model as large as the policy
    policy = run["payload_bytes"] + parts["frozen"]
    assert 0.5 <= parts["frozen"] / policy < 0.75, parts
    assert parts["ref_model"] == policy
    (fact,) = run["residency"]
    assert fact["parts_to_move"] == parts
    assert not any(fact["left_by_owner"].get(p) for p in parts)
    table = " ".join(result.stdout.split())
    assert "frozen params " in table and "ref model " in table


def test_code_that_moves_only_ddp_buffers_leaves_the_parts(invoke, tmp_path):
    pair = HERE + "offload_ddp_buffers,load_ddp_buffers"
    result, run = _run(invoke, tmp_path, "--strategy", pair)
    assert result.exit_code == 1, result.stdout
    assert run["outcome"]["kind"] == "not offloaded", run["verdict"]
    (fact,) = run["residency"]
    parts = run["part_bytes"]
    assert {p: fact["left_by_owner"][p] for p in parts} == parts
    assert fact["param_bytes_left"] == 0  # the DDP buffers did move
    assert any(r.startswith("frozen parameters ") for r in run["not_offloaded"])
    assert any(r.startswith("reference model ") for r in run["not_offloaded"])


def test_a_reference_model_changed_on_the_way_back_is_corrupted(invoke, tmp_path):
    result, run = _run(invoke, tmp_path, "--strategy", HERE + "FlipsReferenceBit")
    assert result.exit_code == 1
    assert run["outcome"]["kind"] == "corrupted"
    assert "ref_model " in run["verdict"] and "differs from before offload" in run["verdict"]


def test_frozen_parameters_swapped_in_the_modules_are_corrupted(invoke, tmp_path):
    # the frozen originals come back bit for bit; the modules compute with negated copies
    result, run = _run(invoke, tmp_path, "--strategy", SWAP + "SwapsFrozenForNegated")
    assert result.exit_code == 1, result.stdout
    assert run["outcome"]["kind"] == "corrupted", run["verdict"]
    problems = run["integrity"]
    assert problems and all(p.startswith("cycle 0: frozen ") for p in problems), problems
    assert all(p.endswith(" differs from before offload") for p in problems), problems


# ------------------------------------------------------------------ parts read live, by name


@pytest.fixture(scope="module")
def runtime():
    from offloadprobe.engine.runtime import open_runtime

    with open_runtime("cpu", 3) as opened:
        yield opened


@pytest.fixture(scope="module")
def frozen_model(runtime):
    """The smallest model, half frozen, with a reference model (built, not trained: the
    checks read bytes only)."""
    from offloadprobe.core.config import ModelConfig
    from offloadprobe.engine.model.builder import build_probe_model

    cfg = ModelConfig(
        num_layers=1,
        hidden_size=128,
        num_attention_heads=4,
        vocab_size=512,
        seq_length=32,
        micro_batch_size=1,
        frozen_fraction=0.5,
        ref_model=True,
    )
    return build_probe_model(cfg, runtime, seed=3)


def _a_frozen_parameter(model):
    """``(module, attribute name, parameter)`` of the first frozen parameter."""
    name = model.frozen[0][0]
    path, attr = name.rsplit(".", 1)
    module = model.chunks[0].module.module.get_submodule(path)
    return module, attr, module._parameters[attr]


@pytest.mark.parametrize(
    "replace",
    [
        pytest.param(lambda p: torch.nn.Parameter(p.detach().clone(), False), id="same bytes"),
        pytest.param(lambda p: torch.nn.Parameter(-p.detach().clone(), False), id="negated"),
        pytest.param(lambda p: None, id="removed"),
    ],
)
def test_the_frozen_parameter_the_module_holds_is_the_one_checked(frozen_model, replace):
    from offloadprobe.engine.model.integrity import fingerprint_state, verify_round_trip

    module, attr, original = _a_frozen_parameter(frozen_model)
    name = frozen_model.frozen[0][0]
    before = fingerprint_state(frozen_model)
    swapped = replace(original)
    if swapped is None:
        del module._parameters[attr]
    else:
        module._parameters[attr] = swapped
    try:
        problems = verify_round_trip(frozen_model, before, 0, grads_zeroed=False)
    finally:
        module._parameters[attr] = original
    if swapped is None:
        assert problems == [f"cycle 0: frozen {name}: no module holds it as a parameter after load"]
    elif torch.equal(swapped, original):
        assert problems == []  # another object, the same bytes: what the model computes with
    else:
        assert problems == [f"cycle 0: frozen {name} differs from before offload"]
    assert verify_round_trip(frozen_model, fingerprint_state(frozen_model), 0) == []


CPU_MOVERS = [p.id for p in _moving_built_ins() if not p.marks]


@pytest.mark.parametrize("strategy", CPU_MOVERS)
def test_a_repeated_offload_or_load_moves_no_part_again(runtime, frozen_model, strategy):
    """offload, offload, load, load on every part (the sequences' invariant): the second
    offload keeps the host copies the first made, and the second load keeps what was
    written on the device between the loads."""
    from offloadprobe.engine.descriptors import close
    from offloadprobe.engine.model.buffers import is_freed, loose_parameters
    from offloadprobe.engine.model.integrity import fingerprint_state, verify_round_trip
    from offloadprobe.engine.strategies import model_strategy

    chunks = frozen_model.offload_chunks
    loose = loose_parameters(chunks)
    assert {part for part, *_ in parts.named(frozen_model)} == set(parts.PARTS)
    before = fingerprint_state(frozen_model)
    with runtime.strategy_code():
        moves = model_strategy(strategy).build(runtime)

    def step(verb):
        with runtime.strategy_code():
            getattr(moves, verb)(chunks)

    try:
        for _ in range(2):
            step("offload")
            assert all(is_freed(p) for p in loose)
        step("load")
        assert verify_round_trip(frozen_model, before, 0) == []
        with torch.no_grad():
            for p in loose:
                p.neg_()  # exact, and undone below
        step("load")
        with torch.no_grad():
            for p in loose:
                p.neg_()
        assert verify_round_trip(frozen_model, before, 0) == []
    finally:
        with runtime.strategy_code():
            close(moves)
