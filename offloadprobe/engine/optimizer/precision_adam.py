"""A project-owned precision-aware Adam, and the switch that makes megatron-core use it.

With ``OptimizerConfig(use_precision_aware_optimizer=True)`` megatron-core hands its
Adam the bf16 parameter *shards* themselves, puts their gradients on
``param.decoupled_grad`` and leaves the fp32 master weights to the optimizer. Upstream
that optimizer is TransformerEngine's ``FusedAdam``; :class:`PrecisionAwareAdam` keeps
the same constructor, state layout (``exp_avg``, ``exp_avg_sq``, ``master_param`` per
parameter, step count in the param group) and the methods megatron calls
(``initialize_state``, ``get_unscaled_state``, ``set_scaled_state``), computed with
ordinary torch ops so it also runs where TransformerEngine is not installed.
``offloadprobe.engine.optimizer.megatron_adam`` makes ``get_megatron_optimizer`` build it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain
from typing import Any

import torch

__all__ = [
    "FUSED_ADAM_API_VERSION",
    "PrecisionAwareAdam",
    "join_fp32",
    "split_fp32",
]

FUSED_ADAM_API_VERSION = "2.1.0"
"""TransformerEngine release whose FusedAdam API (incl. store_param_remainders) we mirror."""

_STATE_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.uint8)
_SCALED_RANGE = {torch.float16: torch.finfo(torch.float16).max / 2.0, torch.uint8: 448.0}
"""Scaled dtypes -> the magnitude a tensor's absmax is mapped to (uint8 holds FP8 E4M3)."""
_CHUNK_ELEMENTS = 1 << 26
"""Elements updated per batch of fp32 temporaries (bounds the step's extra memory)."""
_PRECISION_KWARGS = (
    "master_weight_dtype",
    "exp_avg_dtype",
    "exp_avg_sq_dtype",
    "use_decoupled_grad",
    "store_param_remainders",
)
_TE_MISSING = "requires FusedAdam from TransformerEngine"

if sys.byteorder != "little":  # split_fp32/join_fp32 address the fp32 halves in memory order
    raise ImportError("offloadprobe.engine.optimizer.precision_adam needs a little-endian host")


def split_fp32(master: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Split fp32 ``master`` into (bf16 param, int16 remainder), as TE's remainder kernel does.

    The remainder is the low 16 bits of each fp32 pattern. The bf16 value is the high 16
    bits, plus one when the remainder's top bit is set: ties round away from zero, where
    ``master.to(torch.bfloat16)`` rounds ties to even. :func:`join_fp32` undoes it exactly.
    """
    halves = master.detach().contiguous().reshape(-1).view(torch.int16).view(-1, 2)
    low = halves[:, 0].contiguous()
    high = halves[:, 1] + (low < 0).to(torch.int16)
    return high.view(torch.bfloat16).view(master.shape), low.view(master.shape)


def join_fp32(param: torch.Tensor, remainder: torch.Tensor) -> torch.Tensor:
    """Rebuild the fp32 master bit for bit from a bf16 ``param`` and its int16 ``remainder``."""
    low = remainder.reshape(-1)
    high = param.detach().reshape(-1).view(torch.int16) - (low < 0).to(torch.int16)
    return torch.stack((low, high), dim=-1).view(torch.float32).view(param.shape)


@dataclass(slots=True)
class _Work:
    """One parameter's step inputs, all fp32: grad, weights to update, both moments."""

    param: torch.Tensor
    grad: torch.Tensor
    weight: torch.Tensor
    exp_avg: torch.Tensor
    exp_avg_sq: torch.Tensor


class PrecisionAwareAdam(torch.optim.Optimizer):
    """Adam/AdamW with TE FusedAdam's precision-aware state layout, in plain torch.

    State per parameter ``p`` (``self.state[p]``): ``exp_avg`` and ``exp_avg_sq`` in
    ``exp_avg_dtype`` / ``exp_avg_sq_dtype``; with ``master_weights`` a ``master_param``
    in ``master_weight_dtype``, or for bf16 ``p`` with ``store_param_remainders`` an int16
    tensor of the fp32 master's low halves (see :func:`split_fp32`). fp16 and uint8 (FP8
    E4M3 bit patterns) states carry one fp32 scale each in ``self._scales[p][name]``:
    stored = value / scale, scale = absmax / range (fp16: max/2, E4M3: 448), like TE.
    The math is TE's ``multi_tensor_adam`` in fp32 (L2 or decoupled weight decay).
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        bias_correction: bool = True,
        adam_w_mode: bool = True,
        capturable: bool = False,
        master_weights: bool = False,
        master_weight_dtype: torch.dtype = torch.float32,
        exp_avg_dtype: torch.dtype = torch.float32,
        exp_avg_sq_dtype: torch.dtype = torch.float32,
        use_decoupled_grad: bool = False,
        store_param_remainders: bool = False,
    ) -> None:
        if amsgrad:
            raise ValueError("PrecisionAwareAdam does not implement AMSGrad (nor does FusedAdam)")
        if capturable:
            raise ValueError("capturable=True (CUDA-graph optimizer step) is not supported")
        if master_weights and master_weight_dtype not in (torch.float32, torch.float16):
            raise ValueError(f"master_weight_dtype must be fp32 or fp16, got {master_weight_dtype}")
        for name, dtype in (("exp_avg", exp_avg_dtype), ("exp_avg_sq", exp_avg_sq_dtype)):
            if dtype not in _STATE_DTYPES:
                raise ValueError(f"{name}_dtype must be fp32/fp16/bf16/uint8(FP8), got {dtype}")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
        super().__init__(params, {**defaults, "bias_correction": bias_correction})
        self.adam_w_mode = bool(adam_w_mode)
        self.capturable = False
        self.master_weights = master_weights
        self.master_weight_dtype = master_weight_dtype
        self.exp_avg_dtype = exp_avg_dtype
        self.exp_avg_sq_dtype = exp_avg_sq_dtype
        self.name_to_dtype_map = {
            "exp_avg": exp_avg_dtype,
            "exp_avg_sq": exp_avg_sq_dtype,
            "master_param": master_weight_dtype,
        }
        self.use_decoupled_grad = use_decoupled_grad
        # Like TE: remainders only replace an fp32 master, and only for bf16 params.
        self.store_param_remainders = bool(
            store_param_remainders and master_weights and master_weight_dtype == torch.float32
        )
        self._scales: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    # ---- state ------------------------------------------------------------------------

    def _uses_remainder(self, param: torch.Tensor) -> bool:
        return self.store_param_remainders and param.dtype == torch.bfloat16

    def _new_state(self, param: torch.Tensor, name: str, remainder: bool = False) -> None:
        dtype = torch.int16 if remainder else self.name_to_dtype_map[name]
        self.state[param][name] = torch.zeros(param.shape, dtype=dtype, device=param.device)
        if dtype in _SCALED_RANGE:
            scale = torch.ones(1, dtype=torch.float32, device=param.device)
            self._scales.setdefault(param, {})[name] = scale

    def initialize_state(self, param: torch.Tensor, store_param_remainders: bool | None = None):
        """Create zero moments and, with master weights, the master copy of ``param``.

        megatron calls this with one argument; TE's own signature takes the remainder
        flag too. When given it must agree with the constructor's choice for ``param``.
        """
        remainder = self._uses_remainder(param)
        if self.master_weights and store_param_remainders not in (None, remainder):
            msg = f"store_param_remainders={store_param_remainders} contradicts the optimizer"
            raise ValueError(f"{msg}'s setting for a {param.dtype} parameter")
        self._new_state(param, "exp_avg")
        self._new_state(param, "exp_avg_sq")
        if self.master_weights:
            self._new_state(param, "master_param", remainder=remainder)
            if not remainder:  # zero remainders + the bf16 param already equal the master
                self._write(param, "master_param", param.detach().float())

    def get_unscaled_state(self, param: torch.Tensor, state_name: str) -> torch.Tensor:
        """fp32 value of a state (the stored tensor itself when it is fp32).

        A remainder master comes back as the stored int16 low halves, as from TE: megatron
        checkpoints it with that dtype. Use :meth:`master_param_fp32` for the fp32 master.
        """
        stored = self.state[param][state_name]
        if stored.dtype == torch.int16:
            return stored
        return self._decode(param, state_name, stored)

    def set_scaled_state(self, param: torch.Tensor, state_name: str, unscaled_state: torch.Tensor):
        """Store an fp32 value (int16 low halves for a remainder master) into a state."""
        remainder = state_name == "master_param" and self._uses_remainder(param)
        expected = torch.int16 if remainder else torch.float32
        if unscaled_state.dtype != expected:
            raise TypeError(f"{state_name} takes {expected} here, got {unscaled_state.dtype}")
        if state_name not in self.state[param]:
            self._new_state(param, state_name, remainder=remainder)
        self._write(param, state_name, unscaled_state)

    def master_param_fp32(self, param: torch.Tensor) -> torch.Tensor:
        """The fp32 weights Adam updates: the master (rebuilt from remainders) or ``param``.

        Aliases storage where nothing needs converting (an fp32 master, an fp32 ``param``).
        """
        stored = self.state[param].get("master_param")
        if stored is None:
            return param.detach().float()
        if stored.dtype == torch.int16:
            return join_fp32(param, stored)
        return self._decode(param, "master_param", stored)

    def _decode(self, param: torch.Tensor, name: str, stored: torch.Tensor) -> torch.Tensor:
        if stored.dtype == torch.float32:
            return stored
        if stored.dtype == torch.uint8:
            return stored.view(torch.float8_e4m3fn).float() * self._scales[param][name]
        if stored.dtype == torch.float16:
            return stored.float() * self._scales[param][name]
        return stored.float()

    def _write(self, param: torch.Tensor, name: str, value: torch.Tensor) -> None:
        target = self.state[param][name]
        value = value.reshape(target.shape)
        if target.dtype in _SCALED_RANGE:
            scale = self._scales[param][name]
            absmax = value.abs().amax() if value.numel() else value.new_zeros(())
            scale.copy_(absmax / _SCALED_RANGE[target.dtype])
            value = value * torch.where(scale > 0, scale.reciprocal(), torch.zeros_like(scale))
            if target.dtype == torch.uint8:
                value = value.to(torch.float8_e4m3fn).view(torch.uint8)
        target.copy_(value)

    def state_dict(self) -> dict[str, Any]:
        """torch's state dict with every state unscaled to fp32 (remainders stay int16)."""
        packed = super().state_dict()
        params = _index_to_param(packed, self.param_groups)
        packed["state"] = {
            index: {name: self.get_unscaled_state(params[index], name) for name in entries}
            for index, entries in packed["state"].items()
        }
        return packed

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load hyper-parameters via torch, then re-store each state in its own dtype."""
        super().load_state_dict(state_dict)
        params = _index_to_param(state_dict, self.param_groups)
        for index, entries in state_dict["state"].items():
            param = params[index]
            self.state[param] = {}
            self._scales.pop(param, None)
            for name, value in entries.items():
                if value is not None:
                    value = value if value.dtype == torch.int16 else value.float()
                    self.set_scaled_state(param, name, value)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear ``.grad``, or ``.decoupled_grad`` when the optimizer reads that."""
        if not self.use_decoupled_grad:
            super().zero_grad(set_to_none=set_to_none)
            return
        for param in chain.from_iterable(g["params"] for g in self.param_groups):
            if set_to_none:
                param.decoupled_grad = None
            elif getattr(param, "decoupled_grad", None) is not None:
                param.decoupled_grad.zero_()

    # ---- step -------------------------------------------------------------------------

    @torch.no_grad()
    def step(self, closure=None, grad_scaler=None):
        """One Adam step for every parameter with a gradient; ``grad_scaler`` is ignored.

        TE uses ``grad_scaler`` only in capturable mode, which this class refuses.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            if group["params"]:
                self._step_group(group)
        return loss

    def _step_group(self, group: dict[str, Any]) -> None:
        group["step"] = group.get("step", 0) + 1  # one count per group, as in FusedAdam
        for batch in _batches(group["params"]):
            work = [w for w in map(self._load, batch) if w is not None]
            if work:
                _adam_update(work, group, decoupled=self.adam_w_mode)
                for item in work:
                    self._store(item)

    def _load(self, param: torch.Tensor) -> _Work | None:
        grad = getattr(param, "decoupled_grad", None) if self.use_decoupled_grad else param.grad
        if grad is None:
            return None
        if grad.is_sparse:
            raise NotImplementedError("PrecisionAwareAdam does not support sparse gradients")
        if param.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise TypeError(f"parameters must be fp32, fp16 or bf16, got {param.dtype}")
        state = self.state[param]
        if not state:
            self.initialize_state(param)
        return _Work(
            param,
            grad.detach().float(),
            self.master_param_fp32(param),
            self._decode(param, "exp_avg", state["exp_avg"]),
            self._decode(param, "exp_avg_sq", state["exp_avg_sq"]),
        )

    def _store(self, work: _Work) -> None:
        param, state = work.param, self.state[work.param]
        for name, value in (("exp_avg", work.exp_avg), ("exp_avg_sq", work.exp_avg_sq)):
            if state[name].dtype != torch.float32:
                self._write(param, name, value)
        master = state.get("master_param")
        if master is not None and master.dtype == torch.int16:
            high, low = split_fp32(work.weight)
            param.detach().copy_(high)
            master.copy_(low)
            return
        if master is not None and master.dtype != torch.float32:
            self._write(param, "master_param", work.weight)
        if work.weight.data_ptr() != param.data_ptr():
            param.detach().copy_(work.weight)


def _index_to_param(packed: dict[str, Any], groups: list[dict[str, Any]]) -> dict[int, Any]:
    saved = chain.from_iterable(g["params"] for g in packed["param_groups"])
    return dict(zip(saved, chain.from_iterable(g["params"] for g in groups), strict=True))


def _batches(params: list[torch.Tensor]) -> Iterator[list[torch.Tensor]]:
    batch: list[torch.Tensor] = []
    size = 0
    for param in params:
        batch.append(param)
        size += param.numel()
        if size >= _CHUNK_ELEMENTS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _adam_update(work: list[_Work], group: dict[str, Any], decoupled: bool) -> None:
    """In place on fp32 lists, in the operation order of TE's ``adam_update``."""
    lr, eps, weight_decay = float(group["lr"]), group["eps"], group["weight_decay"]
    beta1, beta2 = group["betas"]
    corrected = group["bias_correction"]
    correction1 = 1.0 - beta1 ** group["step"] if corrected else 1.0
    correction2 = 1.0 - beta2 ** group["step"] if corrected else 1.0
    grads = [w.grad for w in work]
    weights = [w.weight for w in work]
    exp_avgs = [w.exp_avg for w in work]
    exp_avg_sqs = [w.exp_avg_sq for w in work]
    if weight_decay and not decoupled:  # L2: decay joins the gradient (out of place)
        grads = torch._foreach_add(grads, weights, alpha=weight_decay)
    torch._foreach_mul_(exp_avgs, beta1)
    torch._foreach_add_(exp_avgs, grads, alpha=1.0 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1.0 - beta2)
    denom = torch._foreach_div(exp_avg_sqs, correction2)
    torch._foreach_sqrt_(denom)
    torch._foreach_add_(denom, eps)
    update = torch._foreach_div(exp_avgs, correction1)
    torch._foreach_div_(update, denom)
    if weight_decay and decoupled:
        torch._foreach_add_(update, weights, alpha=weight_decay)
    torch._foreach_add_(weights, update, alpha=-lr)


# ---- choosing the optimizer and wiring it into megatron-core ---------------------------
