"""Adam state of megatron's distributed optimizer, per rank and buffer.

Classic mode keeps fp32 main params (``shard_fp32_from_float16_groups``) next to fp32
``exp_avg``/``exp_avg_sq``; the precision-aware optimizer keeps ``master_param`` in its
own state (int16 remainders with bf16 params and ``store_param_remainders``). State
covers the parameter elements of a rank's shard; alignment padding holds none.
"""

from __future__ import annotations

from dataclasses import dataclass

from offloadprobe.layout.buffers import BufferKind, BufferLayout
from offloadprobe.layout.inputs import DTYPE_BYTES, LayoutError
from offloadprobe.layout.terms import Term


@dataclass(frozen=True, kw_only=True, slots=True)
class OptimizerOptions:
    """Adam state of megatron's distributed optimizer (``OptimizerConfig`` fields)."""

    precision_aware: bool = False
    """``use_precision_aware_optimizer``: TE FusedAdam holds ``master_param`` itself."""
    main_params_dtype: str = "float32"
    store_param_remainders: bool = True
    """With bf16 params, keep only the low 16 bits of the fp32 master (int16)."""
    exp_avg_dtype: str = "float32"
    exp_avg_sq_dtype: str = "float32"

    def __post_init__(self) -> None:
        for name in ("main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
            if getattr(self, name) not in DTYPE_BYTES:
                raise LayoutError(name, f"use one of {', '.join(DTYPE_BYTES)}")
        if (
            not self.precision_aware
            and (self.main_params_dtype, self.exp_avg_dtype, self.exp_avg_sq_dtype)
            != ("float32",) * 3
        ):
            raise LayoutError("precision_aware", "set it to true for non-fp32 optimizer state")

    def master_dtype(self, param_dtype: str) -> str | None:
        """dtype of the master copy, None when the params are themselves the fp32 master."""
        if not self.precision_aware:
            return None if param_dtype == "float32" else "float32"
        if self.store_param_remainders and param_dtype == "bfloat16":
            return "int16"
        return self.main_params_dtype


@dataclass(frozen=True, kw_only=True, slots=True)
class OptimizerState:
    """Adam state one rank holds for one buffer: its shard of the buffer's parameters."""

    kind: BufferKind
    shard_numel: int
    """Parameter elements of the largest data-parallel shard (padding holds no state)."""
    master_dtype: str | None
    master_param_bytes: int
    """fp32 main params (classic, ``shard_fp32_from_float16_groups``) or the
    precision-aware ``master_param`` state (int16 remainders by default)."""
    exp_avg_bytes: int
    exp_avg_sq_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.master_param_bytes + self.exp_avg_bytes + self.exp_avg_sq_bytes


def optimizer_state(buffer: BufferLayout, opt: OptimizerOptions) -> OptimizerState:
    """Adam state on the worst data-parallel rank for ``buffer``."""
    n = buffer.max_shard_numel()
    master = opt.master_dtype(buffer.param_dtype)
    return OptimizerState(
        kind=buffer.kind,
        shard_numel=n,
        master_dtype=master,
        master_param_bytes=n * DTYPE_BYTES[master] if master else 0,
        exp_avg_bytes=n * DTYPE_BYTES[opt.exp_avg_dtype],
        exp_avg_sq_bytes=n * DTYPE_BYTES[opt.exp_avg_sq_dtype],
    )


def optimizer_terms(state: OptimizerState, dp_size: int) -> tuple[Term, ...]:
    """The arithmetic behind ``state``, for display next to the buffer terms."""
    n, k = state.shard_numel, state.kind
    return (
        Term(
            label=f"{k}: optimizer shard numel",
            formula=f"largest of {dp_size} shards, params only",
            value=n,
            unit="elements",
        ),
        Term(
            label=f"{k}: master params",
            formula=f"{n} x {state.master_dtype or 'none'}",
            value=state.master_param_bytes,
        ),
        Term(label=f"{k}: exp_avg", formula=f"{n} elements", value=state.exp_avg_bytes),
        Term(label=f"{k}: exp_avg_sq", formula=f"{n} elements", value=state.exp_avg_sq_bytes),
    )
