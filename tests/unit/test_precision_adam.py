"""PrecisionAwareAdam against torch's Adam, its bit-level master storage, and megatron wiring.

Everything runs on CPU. The last tests build a real megatron-core DistributedOptimizer
over gloo with a self-contained CUDA-to-host shim (see ``megatron_on_host``).
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from unittest import mock

import pytest
import torch

from offloadprobe.engine.optimizer.megatron_adam import (
    describe,
    megatron_uses,
    transformer_engine_fused_adam,
)
from offloadprobe.engine.optimizer.precision_adam import PrecisionAwareAdam, join_fp32, split_fp32

SHAPES = [(17, 5), (33,), (4, 3, 2)]
HYPER = {"lr": 1e-2, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}
STEPS = 8
TE_INSTALLED = transformer_engine_fused_adam() is not None


def _params(dtype: torch.dtype, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=gen).to(dtype) for shape in SHAPES]


def _grads(step: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 + step)
    return [torch.randn(shape, generator=gen) * 0.1 for shape in SHAPES]


def _train(opt: torch.optim.Optimizer, params: list[torch.Tensor], attr: str = "grad") -> None:
    for step in range(STEPS):
        for param, grad in zip(params, _grads(step), strict=True):
            setattr(param, attr, grad if attr == "decoupled_grad" else grad.to(param.dtype))
        opt.step()


def _rel_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Largest elementwise |actual - expected| / |expected| (floor 1e-3 on the divisor)."""
    diff = (actual.double() - expected.double()).abs()
    return float((diff / expected.double().abs().clamp_min(1e-3)).max())


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.contiguous().view(torch.int32)


# ---- Adam math -----------------------------------------------------------------------


@pytest.mark.parametrize("master_weights", [False, True])
def test_fp32_params_match_torch_adamw(master_weights: bool) -> None:
    ours, ref = _params(torch.float32), _params(torch.float32)
    opt = PrecisionAwareAdam(ours, **HYPER, adam_w_mode=True, master_weights=master_weights)
    _train(opt, ours)
    ref_opt = torch.optim.AdamW(ref, **HYPER, foreach=False)
    _train(ref_opt, ref)
    for mine, theirs in zip(ours, ref, strict=True):
        assert _rel_err(mine, theirs) < 1e-5
        for key in ("exp_avg", "exp_avg_sq"):
            assert _rel_err(opt.state[mine][key], ref_opt.state[theirs][key]) < 1e-5
        if master_weights:
            assert torch.equal(opt.state[mine]["master_param"], mine)
    assert opt.param_groups[0]["step"] == STEPS


def test_l2_mode_matches_torch_adam() -> None:
    ours, ref = _params(torch.float32), _params(torch.float32)
    _train(PrecisionAwareAdam(ours, **HYPER, adam_w_mode=False), ours)
    _train(torch.optim.Adam(ref, **HYPER, foreach=False), ref)
    for mine, theirs in zip(ours, ref, strict=True):
        assert _rel_err(mine, theirs) < 1e-5


def test_bf16_params_with_fp32_master_follow_fp32_adamw() -> None:
    ours = _params(torch.bfloat16)
    ref = [p.float() for p in ours]
    opt = PrecisionAwareAdam(ours, **HYPER, master_weights=True, use_decoupled_grad=True)
    _train(opt, ours, attr="decoupled_grad")
    _train(torch.optim.AdamW(ref, **HYPER, foreach=False), ref)
    for mine, theirs in zip(ours, ref, strict=True):
        master = opt.get_unscaled_state(mine, "master_param")
        assert master.dtype == torch.float32 and mine.dtype == torch.bfloat16
        assert _rel_err(master, theirs) < 1e-5
        assert torch.equal(mine, master.to(torch.bfloat16))


def test_bf16_moments_stay_close_to_fp32_moments() -> None:
    exact, low = _params(torch.bfloat16), _params(torch.bfloat16)
    kwargs = {**HYPER, "master_weights": True, "use_decoupled_grad": True}
    ref_opt = PrecisionAwareAdam(exact, **kwargs)
    opt = PrecisionAwareAdam(
        low, **kwargs, exp_avg_dtype=torch.bfloat16, exp_avg_sq_dtype=torch.bfloat16
    )
    _train(ref_opt, exact, attr="decoupled_grad")
    _train(opt, low, attr="decoupled_grad")
    for mine, theirs in zip(low, exact, strict=True):
        assert opt.state[mine]["exp_avg"].dtype == torch.bfloat16
        assert opt.state[mine]["exp_avg_sq"].dtype == torch.bfloat16
        drift = (opt.master_param_fp32(mine) - ref_opt.master_param_fp32(theirs)).abs().max()
        assert drift < 0.05 * HYPER["lr"] * STEPS  # a few percent of the distance travelled


# ---- bf16 + int16 remainders -----------------------------------------------------------


def test_split_and_join_are_exact_for_every_bit_pattern_kind() -> None:
    gen = torch.Generator().manual_seed(7)
    bits = torch.randint(-(2**31), 2**31 - 1, (1 << 16,), dtype=torch.int32, generator=gen)
    edges = [0x7F7F8000, 0x7F7FFFFF, 0x7FFF8000, 0x00008000, -(2**31), 0x3F808000, 0x3F818000]
    bits = torch.cat([bits, torch.tensor(edges, dtype=torch.int64).to(torch.int32), -bits[:9]])
    master = bits.view(torch.float32)
    param, remainder = split_fp32(master)
    assert param.dtype == torch.bfloat16 and remainder.dtype == torch.int16
    assert torch.equal(_bits(join_fp32(param, remainder)), bits)
    # Only exact ties (low half 0x8000) may round differently from torch's ties-to-even.
    differs = param.view(torch.int16) != master.to(torch.bfloat16).view(torch.int16)
    differs &= ~torch.isnan(master)
    assert bool(((bits[differs] & 0xFFFF) == 0x8000).all())
    assert split_fp32(torch.tensor([1.0 + 2**-8]))[0].item() == 1.0 + 2**-7  # tie: away from 0


def test_remainder_master_is_bit_identical_to_fp32_master() -> None:
    full, packed = _params(torch.bfloat16), _params(torch.bfloat16)
    kwargs = {**HYPER, "master_weights": True, "use_decoupled_grad": True}
    full_opt = PrecisionAwareAdam(full, **kwargs)
    packed_opt = PrecisionAwareAdam(packed, **kwargs, store_param_remainders=True)
    _train(full_opt, full, attr="decoupled_grad")
    _train(packed_opt, packed, attr="decoupled_grad")
    for mine, theirs in zip(packed, full, strict=True):
        assert packed_opt.state[mine]["master_param"].dtype == torch.int16
        master = full_opt.state[theirs]["master_param"]
        assert torch.equal(_bits(packed_opt.master_param_fp32(mine)), _bits(master))
        assert torch.equal(mine, split_fp32(master)[0])  # param = TE-rounded high half


def test_remainders_apply_only_to_bf16_params_with_fp32_master() -> None:
    params = [torch.zeros(3, dtype=torch.bfloat16), torch.zeros(3)]
    opt = PrecisionAwareAdam(params, master_weights=True, store_param_remainders=True)
    for param in params:
        opt.initialize_state(param)
    assert opt.state[params[0]]["master_param"].dtype == torch.int16
    assert opt.state[params[1]]["master_param"].dtype == torch.float32
    fp16_master = PrecisionAwareAdam(
        params, master_weights=True, master_weight_dtype=torch.float16, store_param_remainders=True
    )
    assert not fp16_master.store_param_remainders


# ---- state access as megatron drives it --------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.uint8])
def test_set_then_get_state_round_trips(dtype: torch.dtype) -> None:
    param = torch.zeros(64, dtype=torch.bfloat16)
    opt = PrecisionAwareAdam([param], exp_avg_dtype=dtype)
    value = torch.randn(64, generator=torch.Generator().manual_seed(3)) * 1e-3
    opt.set_scaled_state(param, "exp_avg", value)  # before initialize_state: creates the state
    stored, back = opt.state[param]["exp_avg"], opt.get_unscaled_state(param, "exp_avg")
    assert stored.dtype == dtype and back.dtype == torch.float32
    absmax = float(value.abs().max())
    if dtype in (torch.float32, torch.bfloat16):
        assert torch.equal(back, value.to(dtype).float())
        return
    scale = opt._scales[param]["exp_avg"]
    if dtype == torch.float16:  # absmax maps to fp16 max / 2; 11 significant bits
        assert float(scale) == pytest.approx(absmax / 32752.0, rel=1e-6)
        assert (back - value).abs().max() <= absmax * 2.0**-11
    else:  # FP8 E4M3: absmax maps to 448; 4 significant bits (+ subnormal floor)
        assert float(scale) == pytest.approx(absmax / 448.0, rel=1e-6)
        bound = value.abs() * 2.0**-4 + absmax / 448.0 * 2.0**-10
        assert bool(((back - value).abs() <= bound).all())


def test_remainder_master_state_is_exchanged_as_int16() -> None:
    param = torch.randn(8).to(torch.bfloat16)
    opt = PrecisionAwareAdam([param], master_weights=True, store_param_remainders=True)
    opt.initialize_state(param)
    low = torch.arange(-4, 4, dtype=torch.int16)
    opt.set_scaled_state(param, "master_param", low)
    assert torch.equal(opt.get_unscaled_state(param, "master_param"), low)
    assert torch.equal(opt.master_param_fp32(param), join_fp32(param, low))
    with pytest.raises(TypeError, match="int16"):
        opt.set_scaled_state(param, "master_param", low.float())
    with pytest.raises(TypeError, match="float32"):
        opt.set_scaled_state(param, "exp_avg", torch.zeros(8, dtype=torch.bfloat16))


def test_decoupled_grad_is_read_instead_of_grad() -> None:
    decoupled, plain = _params(torch.float32), _params(torch.float32)
    opt = PrecisionAwareAdam(decoupled, **HYPER, use_decoupled_grad=True)
    for param in decoupled:
        param.grad = torch.full_like(param, 1e6)  # must be ignored
    _train(opt, decoupled, attr="decoupled_grad")
    _train(PrecisionAwareAdam(plain, **HYPER), plain)
    for mine, theirs in zip(decoupled, plain, strict=True):
        assert torch.equal(mine, theirs)
    opt.zero_grad()
    assert all(p.decoupled_grad is None for p in decoupled)


def test_params_without_grad_are_left_alone() -> None:
    params = _params(torch.float32)
    before = [p.clone() for p in params]
    opt = PrecisionAwareAdam(params, **HYPER)
    params[0].grad = torch.ones_like(params[0])
    opt.step()
    assert not torch.equal(params[0], before[0])
    assert torch.equal(params[1], before[1]) and len(opt.state[params[1]]) == 0


def test_state_dict_round_trip_continues_identically() -> None:
    kwargs = {
        **HYPER,
        "master_weights": True,
        "use_decoupled_grad": True,
        "store_param_remainders": True,
        "exp_avg_dtype": torch.bfloat16,
        "exp_avg_sq_dtype": torch.float16,
    }
    first = _params(torch.bfloat16)
    opt = PrecisionAwareAdam(first, **kwargs)
    _train(opt, first, attr="decoupled_grad")
    saved = copy.deepcopy(opt.state_dict())
    assert {v.dtype for v in saved["state"][0].values()} == {torch.float32, torch.int16}
    second = [p.clone() for p in first]
    clone = PrecisionAwareAdam(second, **kwargs)
    clone.load_state_dict(saved)
    _train(opt, first, attr="decoupled_grad")
    _train(clone, second, attr="decoupled_grad")
    for mine, theirs in zip(first, second, strict=True):
        assert torch.equal(mine, theirs)
        assert torch.equal(opt.state[mine]["master_param"], clone.state[theirs]["master_param"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"amsgrad": True}, "AMSGrad"),
        ({"capturable": True}, "capturable"),
        ({"master_weights": True, "master_weight_dtype": torch.bfloat16}, "master_weight_dtype"),
        ({"exp_avg_sq_dtype": torch.int8}, "exp_avg_sq_dtype"),
    ],
)
def test_unsupported_settings_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PrecisionAwareAdam([torch.zeros(2)], **kwargs)


def test_initialize_state_refuses_a_contradicting_remainder_flag() -> None:
    param = torch.zeros(4, dtype=torch.bfloat16)
    opt = PrecisionAwareAdam([param], master_weights=True, store_param_remainders=False)
    with pytest.raises(ValueError, match="store_param_remainders"):
        opt.initialize_state(param, True)
    opt.initialize_state(param, False)  # TE's two-argument form
    assert opt.state[param]["master_param"].dtype == torch.float32


# ---- megatron-core wiring ---------------------------------------------------------------


def test_describe_names_the_class_and_why() -> None:
    if TE_INSTALLED:
        assert describe(PrecisionAwareAdam).endswith("(chosen over TE's FusedAdam)")
    else:
        assert describe() == "offloadprobe PrecisionAwareAdam (TransformerEngine not installed)"
    assert describe(torch.optim.AdamW) == "torch.optim.adamw.AdamW"


@pytest.mark.skipif(TE_INSTALLED, reason="with TE installed megatron's own check passes")
def test_megatron_config_accepts_precision_aware_only_inside_the_block() -> None:
    import megatron.core.optimizer as mc_optimizer
    from megatron.core.optimizer import OptimizerConfig

    kwargs = {
        "optimizer": "adam",
        "bf16": True,
        "use_distributed_optimizer": True,
        "use_precision_aware_optimizer": True,
    }
    # 0.19.2: "requires FusedAdam from TransformerEngine"; 0.16.1 fails one line earlier, in
    # is_te_min_version (None >= Version: TypeError).
    with pytest.raises((RuntimeError, TypeError)):
        OptimizerConfig(**kwargs)
    original = (mc_optimizer.Adam, mc_optimizer.USING_PYTORCH_OPTIMIZER)
    with megatron_uses(PrecisionAwareAdam) as patched:
        assert mc_optimizer.Adam is PrecisionAwareAdam
        assert OptimizerConfig(**kwargs).store_param_remainders  # not switched off
        with pytest.raises(AssertionError):  # megatron's other checks still run
            OptimizerConfig(**{**kwargs, "use_distributed_optimizer": False})
    assert "megatron.core.optimizer.USING_PYTORCH_OPTIMIZER" in patched
    assert (mc_optimizer.Adam, mc_optimizer.USING_PYTORCH_OPTIMIZER) == original
    with pytest.raises((RuntimeError, TypeError)):
        OptimizerConfig(**kwargs)


def test_megatron_uses_refuses_a_class_without_the_precision_api() -> None:
    with pytest.raises(TypeError, match="exp_avg_dtype"), megatron_uses(torch.optim.AdamW):
        pass


# ---- a real DistributedOptimizer, on CPU -------------------------------------------------


def _host_device(device: object) -> object:
    if isinstance(device, int) or (device is not None and torch.device(device).type == "cuda"):
        return torch.device("cpu")
    return device


class _CudaToHost(torch.overrides.TorchFunctionMode):
    """Every tensor megatron asks to put on CUDA lands in host memory instead."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if "device" in kwargs:
            kwargs["device"] = _host_device(kwargs["device"])
        return args[0] if func is torch.Tensor.cuda else func(*args, **kwargs)


class _NullStream:
    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def wait_stream(self, *args: object) -> None:
        pass


_TENSOR_TYPE = torch.Tensor.type


def _cuda_type_name(self: torch.Tensor, *args: object, **kwargs: object) -> object:
    """megatron sorts params by 'torch.cuda.BFloat16Tensor'-style names."""
    name = _TENSOR_TYPE(self, *args, **kwargs)
    if args or kwargs or name.startswith("torch.cuda."):
        return name
    return "torch.cuda." + name.removeprefix("torch.")


@contextlib.contextmanager
def _cuda_on_host():
    patches = [
        mock.patch("torch.cuda.current_device", lambda: 0),
        mock.patch("torch.cuda.synchronize", lambda *a, **k: None),
        mock.patch("torch.cuda.Stream", _NullStream),
        mock.patch("torch.cuda.current_stream", lambda *a, **k: _NullStream()),
        mock.patch("torch.cuda.stream", lambda *a, **k: contextlib.nullcontext()),
        mock.patch.object(torch.Tensor, "type", _cuda_type_name),
    ]
    with contextlib.ExitStack() as stack, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for patch in patches:
            stack.enter_context(patch)
        stack.enter_context(_CudaToHost())
        yield


@pytest.fixture(scope="module")
def megatron_on_host(tmp_path_factory: pytest.TempPathFactory):
    """A gloo world of one with megatron's parallel groups; yields the CUDA-to-host shim."""
    pytest.importorskip("megatron.core")
    from megatron.core import parallel_state

    dist = torch.distributed
    own_world = not dist.is_initialized()
    if own_world:
        store = tmp_path_factory.mktemp("gloo") / "store"
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    own_groups = not parallel_state.model_parallel_is_initialized()
    if own_groups:
        parallel_state.initialize_model_parallel(1, 1)
    yield _cuda_on_host
    if own_groups:
        parallel_state.destroy_model_parallel()
    if own_world:
        dist.destroy_process_group()


def _tiny_megatron_model():
    from megatron.core.transformer.module import MegatronModule
    from megatron.core.transformer.transformer_config import TransformerConfig

    class Tiny(MegatronModule):
        def __init__(self, config: TransformerConfig) -> None:
            super().__init__(config)
            self.up = torch.nn.Linear(16, 32)
            self.down = torch.nn.Linear(32, 8, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.down(torch.relu(self.up(x)))

    config = TransformerConfig(
        num_layers=1, hidden_size=16, num_attention_heads=1, bf16=True, params_dtype=torch.bfloat16
    )
    torch.manual_seed(0)
    return config, Tiny(config).to(torch.bfloat16)


def _megatron_build(config, module, precision_aware: bool):
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, overlap_grad_reduce=False, use_distributed_optimizer=True
    )
    model = DistributedDataParallel(config=config, ddp_config=ddp_config, module=module)
    opt_config = OptimizerConfig(
        optimizer="adam",
        lr=1e-2,
        weight_decay=0.1,
        bf16=True,
        use_distributed_optimizer=True,
        clip_grad=0.0,
        use_precision_aware_optimizer=precision_aware,
    )
    optimizer = get_megatron_optimizer(opt_config, [model])
    inner = [o.optimizer for o in getattr(optimizer, "chained_optimizers", [optimizer])]
    return model, optimizer, inner[0]


def _megatron_train(model, optimizer, batch: torch.Tensor, steps: int) -> None:
    for _ in range(steps):
        model.zero_grad_buffer()
        optimizer.zero_grad()
        model(batch).float().pow(2).mean().backward()
        model.finish_grad_sync()
        optimizer.step()


def test_distributed_optimizer_with_precision_aware_adam_matches_fp32_main_params(
    megatron_on_host,
) -> None:
    config, module = _tiny_megatron_model()
    batch = torch.randn(4, 16, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    with megatron_on_host():  # reference: megatron's own fp32 main params + torch AdamW
        ref_model, ref_opt, ref_inner = _megatron_build(config, copy.deepcopy(module), False)
        _megatron_train(ref_model, ref_opt, batch, steps=3)
    with megatron_on_host(), megatron_uses(PrecisionAwareAdam):
        model, opt, inner = _megatron_build(config, module, True)
        _megatron_train(model, opt, batch, steps=2)
        opt.load_state_dict(opt.state_dict())  # checkpoint path: get/set_scaled_state
        _megatron_train(model, opt, batch, steps=1)
    assert isinstance(inner, PrecisionAwareAdam) and isinstance(ref_inner, torch.optim.AdamW)
    assert inner.master_weights and inner.use_decoupled_grad and inner.store_param_remainders
    for group, ref_group in zip(inner.param_groups, ref_inner.param_groups, strict=True):
        for shard, ref_main in zip(group["params"], ref_group["params"], strict=True):
            assert shard.dtype == torch.bfloat16
            assert inner.state[shard]["master_param"].dtype == torch.int16
            assert _rel_err(inner.master_param_fp32(shard), ref_main) < 1e-5
    for param, ref_param in zip(model.parameters(), ref_model.parameters(), strict=True):
        assert torch.equal(param, ref_param)  # no rounding tie was hit with this seed
