"""How much host memory one ``offloadprobe run`` needs, before anything is built.

In CPU emulation the emulated device lives in host memory too, so a run holds the
model's parameters, gradients and optimizer state as host memory, plus whatever the
strategies copy, plus the train step's transients. On CUDA only the strategies' host
copies (pinned, possibly rounded) and the process itself count. The figures are an
estimate with stated terms, calibrated on the probe model (CPU emulation, torch
2.13, megatron-core 0.16.1, VmHWM: lazy 1.29 GiB at a 32 MiB payload and 2.37 GiB at
128 MiB, naive 1.78 GiB at 64 MiB), so that a run which cannot fit is refused before it
starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from offloadprobe.core.config import ModelConfig, OptimizerChoice
from offloadprobe.layout.terms import Term
from offloadprobe.plan.probe import probe_payload, probe_projection

GiB = 1024**3
PROCESS_BYTES = {"cpu": GiB + GiB // 20, "cuda": 3 * GiB // 2}
"""Python, torch, megatron-core and (on CUDA) the CUDA context's host side."""
TRAIN_TRANSIENT_X = 2.5
"""Train-step transients (activations, Adam temporaries) over the payload, measured."""
STATE_COPY_X_EMULATED = 1.5
"""Optimizer-state host copies and their transients over the state bytes, in CPU emulation
(measured: lazy + complete at 64 MiB peaked at 2.11 GiB VmHWM; this gives 2.19 GiB)."""
_STATE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "uint8": 1}


@dataclass(frozen=True, kw_only=True, slots=True)
class Footprint:
    """The host bytes a run needs, with its terms."""

    payload_bytes: int
    total_bytes: int
    terms: tuple[Term, ...]

    def largest_payload(self, available: int, *, device: str) -> int:
        """The payload whose estimate just fits ``available`` (the estimate is linear)."""
        fixed = PROCESS_BYTES[device]
        per_byte = (self.total_bytes - fixed) / self.payload_bytes
        return max(0, int((available - fixed) / per_byte))


def optimizer_state_bytes(params: int, choice: OptimizerChoice) -> int:
    """Bytes of Adam state for ``params`` bf16 parameters (fp32 master, two moments)."""
    if not choice.precision_aware:
        return 12 * params
    master = 2 if choice.store_param_remainders else 4
    return params * (
        master + _STATE_BYTES[choice.exp_avg_dtype] + _STATE_BYTES[choice.exp_avg_sq_dtype]
    )


def _strategy_peak(
    model: ModelConfig, strategy: str, *, emulated: bool, payload: int, load_user: bool = True
) -> int:
    """Host bytes the parameter strategy holds at its peak, projected from its descriptor;
    one that declares no host allocations (the user's): 2 x payload. ``load_user=False``
    takes a user's spec at that without importing it (its module may import torch)."""
    from offloadprobe.core.registry import is_user_spec
    from offloadprobe.engine.strategies import model_strategy

    if not load_user and is_user_spec(strategy):
        return 2 * payload
    if model_strategy(strategy).host_events is None:
        return 2 * payload
    return probe_projection(model, strategy, emulated=emulated, cycles=2).peak


def _moves_state(optimizer_strategy: str, choice: OptimizerChoice) -> bool:
    from offloadprobe.engine.optimizer.strategies import optimizer_strategy as info

    keys = info(optimizer_strategy).moved_keys
    return keys is None or bool(keys(choice.precision_aware))


def estimate(
    model: ModelConfig,
    *,
    strategy: str,
    optimizer_strategy: str,
    optimizer: OptimizerChoice,
    device: str,
    load_user: bool = True,
) -> Footprint:
    """Host bytes ``offloadprobe run`` needs on ``device`` (``cpu`` or ``cuda``)."""
    emulated = device == "cpu"
    payload = probe_payload(model)
    params = payload // 2
    state = optimizer_state_bytes(params, optimizer)
    grads = 4 * params
    copies = _strategy_peak(
        model, strategy, emulated=emulated, payload=payload, load_user=load_user
    )
    factor = STATE_COPY_X_EMULATED if emulated else 2.0
    state_copies = int(state * factor) if _moves_state(optimizer_strategy, optimizer) else 0
    terms = [
        Term(
            label="process",
            formula="interpreter, torch, megatron-core",
            value=PROCESS_BYTES[device],
        )
    ]
    if emulated:
        device_bytes = payload + grads + state
        train = int(TRAIN_TRANSIENT_X * payload)
        terms += [
            Term(
                label="emulated device",
                value=device_bytes,
                formula="bf16 params + fp32 grads + optimizer state, in host memory",
            ),
            Term(
                label="train step",
                value=train,
                formula=f"{TRAIN_TRANSIENT_X} x payload of transients (measured)",
            ),
        ]
        need = device_bytes + max(train, copies + state_copies)
    else:
        need = copies + state_copies
    terms += [
        Term(
            label=f"{strategy} host copies",
            value=copies,
            formula="projected host peak of the parameter strategy",
        ),
        Term(
            label=f"{optimizer_strategy} host copies",
            value=state_copies,
            formula="optimizer state x1.5 (x2 on CUDA: pinned rounding)",
        ),
    ]
    total = PROCESS_BYTES[device] + need
    terms.append(Term(label="total", formula="sum, overlapping terms taken once", value=total))
    return Footprint(payload_bytes=payload, total_bytes=total, terms=tuple(terms))
