"""A scenario's typed record: the sections of its file, validated (``schema.py`` reads
the TOML and builds these), and the error every mistake in a file raises."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from offloadprobe.core.errors import UsageError
from offloadprobe.layout.inputs import DdpOptions, ModelSpec, Parallelism
from offloadprobe.layout.optimizer_state import OptimizerOptions
from offloadprobe.layout.stages import ModelLayout, lay_out_model

Outcome = Literal["oom", "ok"]


class ScenarioError(UsageError):
    """A scenario file the schema rejects: ``path``, dotted ``key`` and how to fix it.
    ``named``: the message names its keys itself (``[model] num_layers=94 is not
    divisible by [parallelism] pp=8: ...``), so the line does not repeat ``key``."""

    def __init__(self, path: Path | str, key: str, message: str, *, named: bool = False) -> None:
        self.path = Path(path)
        self.key = key
        self.message = message
        self.line = message if named else f"{key}: {message}"
        """The problem without the file's name."""
        super().__init__(f"{path}: {self.line}")


class ScenarioErrors(ScenarioError):
    """Every problem of one file at once: the file's name, then one line per problem.
    ``key`` and ``message`` are the first problem's."""

    def __init__(self, path: Path | str, problems: list[ScenarioError]) -> None:
        first = problems[0]
        super().__init__(path, first.key, first.message)
        self.problems = list(problems)
        lines = "\n".join(f"  {p.line}" for p in problems)
        self.args = (f"{path}: {len(problems)} problems, fix each:\n{lines}",)

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSection:
    spec: ModelSpec
    dtype: str = "bfloat16"
    name: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class OffloadSection:
    """What the trainer moves off the GPU between phases."""

    params: bool = True
    grads: bool = False
    """Grad buffers released from the GPU between phases (megatron-core and verl free
    them and zero them on reload; nothing reaches the host)."""
    optimizer: bool = False
    optimizer_options: OptimizerOptions = field(default_factory=OptimizerOptions)


@dataclass(frozen=True, kw_only=True, slots=True)
class LimitSection:
    """Budgets, in bytes; ``None`` when the report gives none."""

    host_memory_per_node: int | None = None
    """cgroup / node host memory the offloaded state must fit in."""
    gpu_memory_per_device: int | None = None
    host_reserved_per_node: int = 0
    """Host bytes other things hold meanwhile (rollout engine, ref model, Ray...)."""
    gpu_reserved_per_device: int = 0
    """GPU bytes the next phase claims while the trainer is offloaded (e.g. vLLM)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Expectation:
    strategy: str
    outcome: Outcome
    kind: Literal["params", "optimizer"]
    note: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Source:
    title: str
    url: str | None = None
    notes: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Repro:
    """A scaled-down run that should reproduce the outcomes on one machine."""

    payload: int
    cycles: int = 3
    ranks_per_node: int = 1
    """Scaled ranks run together in one node cgroup under the scaled node limit."""
    options: dict[str, Any] = field(default_factory=dict)
    """Any other ``offloadprobe run`` option the scenario sets for its children (the option
    model's scenario keys: ``train_steps``, ``seed``...), by its Python name."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Scenario:
    path: Path
    model: ModelSection
    parallelism: Parallelism
    ddp: DdpOptions
    offload: OffloadSection
    limit: LimitSection
    expect: tuple[Expectation, ...]
    source: Source | None
    """Where it comes from; needed in a packaged scenario, optional in the user's own."""
    repro: Repro | None = None

    @property
    def name(self) -> str:
        return self.path.stem

    def layout(self) -> ModelLayout:
        return lay_out_model(self.model.spec, self.parallelism, self.ddp)

    def expected(self, strategy: str, kind: str | None = None) -> Outcome | None:
        return next(
            (
                e.outcome
                for e in self.expect
                if e.strategy == strategy and (kind is None or e.kind == kind)
            ),
            None,
        )
