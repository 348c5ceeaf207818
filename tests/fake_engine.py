"""A second engine for the tests: a plain ``torch.nn`` model with ``torch.optim.AdamW``,
exposing the training-state interface the harness reads (``engine/engine_state.py``), so
the real runner (``run_cycles(..., build_state=build_fake_state)``) judges a run of an
engine that is not megatron-core.

Nothing here is megatron's: no DDP buffers, no DistributedOptimizer. The inventory names
each parameter (``param``), its gradient (``grad``), each AdamW state tensor by its key
(``exp_avg``, ``exp_avg_sq``, ``step``) and the batch, by ``parameter name/owner``.
Strategies receive the module (``offload(model)``) or the optimizer, as verl's FSDP
helpers take them.

Also the test strategies for it (``tests.fake_engine:X``).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from offloadprobe.core.roles import Holding, Role


class FakeState:
    """One run's model, optimizer and batch."""

    def __init__(self, runtime: Any, *, seed: int, optimizer: bool) -> None:
        torch.manual_seed(seed)
        self.model = torch.nn.Sequential(
            torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64)
        ).cuda()  # CPU emulation: the emulated device's memory
        for p in self.model.parameters():
            p.grad = torch.zeros_like(p)
        self.optimizer: Any = None
        self.optimizer_name = "none"
        if optimizer:
            self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
            self.optimizer_name = "torch.optim.AdamW"
            # made as a first step makes it (AdamW keeps a state it finds): on the device
            # from the build, so an optimizer strategy has it to move at every offload
            for p in self.model.parameters():
                self.optimizer.state[p] = {
                    "step": torch.tensor(0.0),
                    "exp_avg": torch.zeros_like(p),
                    "exp_avg_sq": torch.zeros_like(p),
                }
        gen = torch.Generator().manual_seed(seed)
        self.batch = {
            "x": torch.randn(4, 64, generator=gen).cuda(),
            "y": torch.randn(4, 64, generator=gen).cuda(),
        }

    # -- the training state's interface

    def inventory(self, own: Any = None) -> list[Holding]:
        found = []
        for name, p in self.model.named_parameters():
            found.append(Holding("param", Role.PARAMETERS, f"{name}/param", p))
            if p.grad is not None:
                found.append(Holding("grad", Role.GRADIENTS, f"{name}/grad", p.grad))
        state = self.optimizer.state if self.optimizer is not None else {}
        for name, p in self.model.named_parameters():
            for key, value in state.get(p, {}).items():
                if isinstance(value, torch.Tensor):
                    found.append(Holding(key, Role.OPTIMIZER, f"{name}/{key}", value))
        for key, tensor in self.batch.items():
            found.append(Holding("batch", Role.BATCH, f"batch/{key}", tensor))
        return found

    def labels(self) -> dict[str, str]:
        return {}

    def restores(self, holding: Holding) -> bool:
        return True

    def hung(self, own: Any) -> list[Holding]:
        return []

    def optimizer_groups(self) -> list[list[dict[str, Any]]]:
        return [list(self.optimizer.param_groups)] if self.optimizer is not None else []

    def view_problems(self, cycle: int) -> list[str]:
        return []

    @property
    def modules(self) -> list[Any]:
        return [self.model]

    def strategy_args(self, part: str) -> list[Any]:
        return [self.model] if part == "params" else [self.optimizer]

    @property
    def payload_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.model.parameters())

    @property
    def grad_bytes(self) -> int:
        return self.payload_bytes

    def train(self, steps: int) -> float | None:
        loss = None
        for _ in range(steps):
            for p in self.model.parameters():
                p.grad = torch.zeros_like(p) if p.grad is None else p.grad.zero_()
            out = self.model(self.batch["x"])
            value = torch.nn.functional.mse_loss(out, self.batch["y"])
            value.backward()
            if self.optimizer is not None:
                self.optimizer.step()
            loss = float(value)
        return loss


def build_fake_state(
    cfg: Any, runtime: Any, *, seed: int, optimizer: Any = None, with_optimizer: bool = True
) -> FakeState:
    """The runner's ``build_state`` for the fake engine."""
    return FakeState(runtime, seed=seed, optimizer=with_optimizer)


build_without_optimizer = functools.partial(build_fake_state, with_optimizer=False)
"""The fake engine without an optimizer (no optimizer state, none it could make)."""


# -- strategies for it: ``offload(models)`` / ``load(models)`` over ``[model]``


class ToHost:
    """Moves every parameter to host memory and back, frees the gradients (honest)."""

    def __init__(self, runtime: Any = None) -> None:
        self.device: Any = None

    def offload(self, models: list[Any]) -> None:
        for model in models:
            for p in model.parameters():
                self.device = p.device
                p.data = p.data.to("cpu")
                p.grad = None

    def load(self, models: list[Any]) -> None:
        for model in models:
            for p in model.parameters():
                p.data = p.data.to(self.device)
                p.grad = torch.zeros_like(p)


class CorruptsOneWeight(ToHost):
    """Moves honestly, then changes one weight on load."""

    def load(self, models: list[Any]) -> None:
        super().load(models)
        with torch.no_grad():
            first = next(models[0].parameters())
            first.view(-1)[7] += 1.0


class MovesNothing:
    """Offload and load that do nothing."""

    def __init__(self, runtime: Any = None) -> None:
        pass

    def offload(self, models: list[Any]) -> None:
        pass

    def load(self, models: list[Any]) -> None:
        pass
