"""The FSDP2 engine's training state as the harness reads it (``engine/engine_state.py``).

Built in the worker by the engine's factory, :func:`build_training_state`, on the world
the engine's session made (``session.py``: ``Runtime.engine_world``), with the build the
run's model strategy asks for (its module's ``BUILD``: ``CPUOffloadPolicy`` rows). What a
model strategy receives is the root ``nn.Module`` (verl's ``offload_fsdp_model_to_cpu(model)``
signature), what an optimizer strategy receives the ``torch.optim.AdamW``. Every tensor
is named by :mod:`.inventory`, in FSDP2's own words.
"""

from __future__ import annotations

import importlib
from typing import Any

from offloadprobe.core.errors import UsageError
from offloadprobe.core.registry import is_user_spec
from offloadprobe.core.roles import Holding, Role
from offloadprobe.engines.fsdp2 import readings
from offloadprobe.engines.fsdp2.checks import preset_of
from offloadprobe.engines.fsdp2.inventory import storage_bytes
from offloadprobe.engines.fsdp2.presets import ModelShape, preset
from offloadprobe.engines.fsdp2.state import Fsdp2State, build_state
from offloadprobe.engines.fsdp2.strategies.build import DEFAULT_BUILD, FsdpBuild, build_of
from offloadprobe.engines.fsdp2.strategies.common import fsdp_params, local_tensor


def strategy_build(spec: str | None) -> FsdpBuild:
    """The build the model strategy ``spec`` asks for: its module's ``BUILD`` (a
    registered name's module, or the module of a user's ``package.module:object``)."""
    if not spec:
        return DEFAULT_BUILD
    if is_user_spec(spec):
        module = spec.partition(":")[0]
        if module.endswith(".py"):
            return DEFAULT_BUILD
    else:
        from offloadprobe.engine.strategies import MODEL_STRATEGIES

        module = MODEL_STRATEGIES.module_of(spec)
        if module is None:
            return DEFAULT_BUILD
    try:
        return build_of(importlib.import_module(module))
    except ImportError:
        return DEFAULT_BUILD


def _uneven(fsdp_param: Any) -> bool:
    """Whether this rank's rows of the parameter fall short of the padded chunk."""
    local = local_tensor(fsdp_param.sharded_param)
    return local.numel() < fsdp_param._sharded_param_data.numel()


class Fsdp2Training:
    """One FSDP2 rank's model, AdamW and batch, read through its inventory."""

    optimizer_name = "torch.optim.AdamW"
    grads_zeroed_on_load = False
    """Each train step starts with ``zero_grad(set_to_none=True)``: a gradient's values
    after a load are never read (its storage still must be whole)."""

    def __init__(self, state: Fsdp2State, build: FsdpBuild, runtime: Any) -> None:
        self.runtime = runtime
        self.state = state
        self.build = build
        self.module = state.module
        self.optimizer = state.optimizer

    # -- what the harness reads

    def inventory(self, own: Any = None) -> list[Holding]:
        return self.state.inventory()

    def labels(self) -> dict[str, str]:
        return {}

    def restores(self, holding: Holding) -> bool:
        return True

    def hung(self, own: Any) -> list[Holding]:
        return []

    def optimizer_groups(self) -> list[list[dict[str, Any]]]:
        return [list(self.optimizer.param_groups)]

    def view_problems(self, cycle: int) -> list[str]:
        """Each sharded parameter must still be the view FSDP2 all-gathers from: its local
        tensor at the start of the padded storage FSDP2 keeps (``_sharded_param_data``,
        the same storage and address). A strategy that swapped one without the other, or
        split them apart in one storage, leaves FSDP2 gathering stale bytes."""
        problems = []
        for p in fsdp_params(self.module):
            shard = local_tensor(p.sharded_param)
            data = p._sharded_param_data
            apart = shard.untyped_storage()._cdata != data.untyped_storage()._cdata
            if shard.numel() and (apart or shard.data_ptr() != data.data_ptr()):
                problems.append(
                    f"cycle {cycle}, {p._param_fqn}: the sharded parameter no longer views "
                    "FSDP2's padded shard storage (its next all-gather reads stale bytes)"
                )
        return problems

    @property
    def modules(self) -> list[Any]:
        return [self.module]

    def strategy_args(self, part: str) -> Any:
        return self.module if part == "params" else self.optimizer

    @property
    def payload_bytes(self) -> int:
        """This rank's parameter shards, by storage (padding included: what it holds)."""
        return storage_bytes([h for h in self.inventory() if h.role is Role.PARAMETERS])

    @property
    def grad_bytes(self) -> int:
        return storage_bytes([h for h in self.inventory() if h.role is Role.GRADIENTS])

    def after_offload(self, strategies: list[Any]) -> dict[str, int]:
        """Where each parameter shard and Adam moment is after an offload (and each gradient
        the offload moved with its shard: ``grads_*``, in the host and pinned bytes),
        whether its host memory is page-locked (CUDA's answer, ``Tensor.is_pinned``), how
        many shards are uneven (dim 0 short of the chunk: FSDP2 pads them), and what
        PyTorch's caching host allocator owns now (``readings``)."""
        runtime = self.runtime
        homes = readings.shard_homes(
            self.module, self.optimizer, strategies, is_device=runtime.on_device
        )
        summed = readings.pinning(homes)
        grads = readings.pinning(
            readings.grad_homes(self.module, strategies, is_device=runtime.on_device)
        )
        found = {
            "shards": summed.shards,
            "shards_pinned": summed.pinned,
            "shards_on_host": summed.on_host,
            "shards_on_device": summed.on_device,
            "shards_uneven": sum(1 for p in fsdp_params(self.module) if _uneven(p)),
            "host_bytes": summed.host_bytes + grads.host_bytes,
            "grads_on_host": grads.on_host,
            "grads_pinned": grads.pinned,
            "pinned_requested_bytes": summed.requested_pinned + grads.requested_pinned,
        }
        now = readings.pinned_now()
        if now is not None:
            found["pinned_owned_bytes"] = now.owned
        return found

    def train(self, steps: int) -> float | None:
        loss = None
        for _ in range(steps):
            loss = self.state.train_step()
        return loss


def build_training_state(cfg: Any, runtime: Any, *, seed: int, optimizer: Any = None) -> Any:
    """The engine's factory: ``cfg`` is the run's ``ModelConfig`` (``preset``, blocks as
    ``num_layers``, ``seq_length``, ``micro_batch_size``), on ``runtime.engine_world``."""
    world = runtime.engine_world
    if world is None:
        raise UsageError("the FSDP2 engine needs its session: open the runtime with engine='fsdp2'")
    build = strategy_build(runtime.strategy)
    if build.wrap != "fully_shard":
        raise UsageError(
            "verl_fsdp1 needs FSDP1's FullyShardedDataParallel, whose flat parameters this "
            "engine's inventory does not read: benchmarks/fsdp2_rows.py measures it on a GPU"
        )
    shape = ModelShape(
        block=preset(preset_of(cfg)), blocks=cfg.num_layers, vocab=preset(preset_of(cfg)).vocab
    )
    policy = build.offload_policy(can_pin=runtime.can_pin)
    state = build_state(
        shape,
        world,
        seed=seed,
        batch=cfg.micro_batch_size,
        seq=cfg.seq_length,
        offload_policy=policy,
    )
    # AdamW's moments exist from its first step: one step makes them, as in any job past
    # its first iteration (an optimizer strategy has them to move at every offload)
    state.train_step()
    return Fsdp2Training(state, build, runtime)


__all__ = ["Fsdp2Training", "build_training_state", "strategy_build"]
