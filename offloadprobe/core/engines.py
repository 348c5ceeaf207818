"""Training engines: what each one is, named once, in one registry (torch-free).

An engine is the training framework a run's state lives in: megatron-core's DDP buffers
and DistributedOptimizer, or PyTorch's ``fully_shard`` and ``torch.optim.AdamW``. Its
descriptor, :class:`EngineInfo`, says everything the tool needs before a worker starts:
its name and summary, the imports a worker makes up front (the zygote preloads them and
keys its cache by them), the parallel and optimizer options it honours, its owner words
and the role of each (``core.roles``), the checks that exit 2 before any worker starts,
the package of its strategies and where its ``plan`` layout lives. Nothing here imports
an engine's modules: the factory and the layout are ``"package.module:object"`` strings,
imported in the worker (or by ``plan``) only.

Built-in engines are registered by module path; a third party registers its descriptor
under the entry-point group ``offloadprobe.engines``. A name is registered once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from offloadprobe.core.errors import UsageError
from offloadprobe.core.registry import Registry
from offloadprobe.core.roles import Role

DEFAULT_ENGINE = "megatron"
GROUP = "offloadprobe.engines"
ATTRIBUTE = "ENGINE"
"""The name under which an engine's descriptor module exports its :class:`EngineInfo`."""


@dataclass(frozen=True, kw_only=True, slots=True)
class EngineInfo:
    """Everything offloadprobe knows about one training engine before a worker starts."""

    name: str
    summary: str
    """One line: what the engine is (``--help`` and ``offloadprobe strategies``)."""
    factory: str
    """``"package.module:object"``: ``object(cfg, runtime)`` builds the training state
    (``inventory()``, train steps, what its strategies receive), imported in the worker."""
    preload: tuple[str, ...] = ()
    """Modules a worker imports before the zero (the zygote imports them up front; they
    are part of its key, so a forked worker of another engine never shares its baseline)."""
    parallel_options: frozenset[str] = frozenset()
    """The ``ParallelConfig`` fields it honours beyond 1 (``tp``, ``pp``, ``ep`` ...)."""
    optimizer_options: frozenset[str] = frozenset()
    """The optimizer flags it honours (``precision_aware``, state dtypes)."""
    owners: Mapping[str, Role] = field(default_factory=dict)
    """Its owner words and the role of each: ``param_data`` -> parameters."""
    strategy_packages: tuple[str, ...] = ()
    """Packages of its built-in strategies (model, then optimizer), registered by text."""
    check: Callable[[Any], None] | None = None
    """``check(cfg)`` raises ``UsageError`` for a configuration the engine cannot run, in
    the parent before any worker starts (torch-free); None: nothing to check."""
    session: str | None = None
    """``"package.module:object"``: ``object(context)``, a context manager that joins the
    engine's ranks and makes its parallel state for one runtime (``engine.runtime.
    engine_session``), imported in the worker; None: a one-rank group and nothing else."""
    size_model: Callable[[Any, int], Any] | None = None
    """``size_model(model_config, payload_bytes)``: ``--payload`` in the engine's terms
    (torch-free); None: megatron's (``core.config.size_for_payload``)."""
    layout: str | None = None
    """``"package.module:object"`` of its torch-free ``plan`` layout; None: not projectable."""
    default_strategy: str = "lazy"
    """The model strategy ``run`` takes where ``--strategy`` is not given (the engine's fix)."""
    default: bool = False

    def role_of(self, owner: str) -> Role | None:
        return self.owners.get(owner)


def _adapt(name: str, found: Any) -> EngineInfo:
    if not isinstance(found, EngineInfo):
        raise UsageError(
            f"engine {name!r}: its entry point must name an offloadprobe.core.engines."
            f"EngineInfo, not {type(found).__name__}"
        )
    if found.name != name:
        raise UsageError(f"engine {name!r}: its descriptor is named {found.name!r}")
    return found


ENGINES: Registry[EngineInfo] = Registry(
    "engine", GROUP, _adapt, attribute=ATTRIBUTE, user_forms=()
)
ENGINES.register_module("megatron", "offloadprobe.engines.megatron.descriptor")
ENGINES.register_module("fsdp2", "offloadprobe.engines.fsdp2.descriptor")


def engine(name: str) -> EngineInfo:
    """The descriptor of a registered engine; an unknown name exits 2 with the near one."""
    return ENGINES.get(name)


def register_engine_strategies(registry: Registry[Any], of: str) -> None:
    """Register in ``registry`` every engine's built-in strategies of its kind (``of``: the
    descriptor class their ``STRATEGY`` calls), from each engine's ``strategy_packages``,
    read by text as the harness's own are (only the packages' parents are imported)."""
    import importlib.util
    from pathlib import Path

    for info in ENGINES.entries():
        for package in info.strategy_packages:
            spec = importlib.util.find_spec(package)
            if spec is None or not spec.submodule_search_locations:
                raise UsageError(f"engine {info.name!r}: no strategy package {package!r}")
            for folder in spec.submodule_search_locations:
                registry.register_package(package, Path(folder), of=of)


def engine_help() -> str:
    """``--engine``'s help: every engine, one clause each (imports descriptors only)."""
    parts = [f"{info.name} ({info.summary})" for info in ENGINES.entries()]
    return f"Training engine: {'; '.join(parts)}. Default {DEFAULT_ENGINE}."


__all__ = [
    "DEFAULT_ENGINE",
    "ENGINES",
    "EngineInfo",
    "engine",
    "engine_help",
    "register_engine_strategies",
]
