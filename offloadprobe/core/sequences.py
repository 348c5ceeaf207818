"""Phase sequences (``--sequence``): the order in which a run calls the offload code.

RL jobs do not always call ``train -> offload -> load``: a validation without a refit
offloads what is already offloaded, a colocated role loads what was never offloaded, a
checkpoint is saved between phases. A sequence is a list of steps, or a named preset::

    --sequence train,offload,load,train,offload,offload,load,train
    --sequence double-offload

The documented invariant: **a correct strategy treats an offload of what is already
offloaded, and a load of what is already loaded, as a no-op.** Every built-in strategy
keeps it.

Steps, numbered from 1 in verdicts:

- ``train``: ``--train-steps`` real train steps; every part must be on the device;
- ``offload`` / ``load``: both parts' moves, in the configured order (``--params-first``);
- ``offload-params`` / ``load-params``, ``offload-optimizer`` / ``load-optimizer``: one
  part's moves;
- ``rollout``: claims ``--rollout-claim`` bytes of device memory (nothing when unset), as
  a rollout engine would between an offload and a load;
- ``checkpoint``: saves the model and the optimizer with ``torch.distributed.checkpoint``
  to a temporary folder, then removes it (``engine/checkpoint.py``); every part must be on
  the device.

Torch-free: the CLI, the option model and scenario files check a sequence before any
model is built (exit 2 for one that cannot run).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from offloadprobe.core.errors import UsageError

PARAMS, OPTIMIZER = "params", "optimizer"
MOVES: dict[str, tuple[str, tuple[str, ...]]] = {
    "offload": ("offload", (PARAMS, OPTIMIZER)),
    "load": ("load", (PARAMS, OPTIMIZER)),
    "offload-params": ("offload", (PARAMS,)),
    "load-params": ("load", (PARAMS,)),
    "offload-optimizer": ("offload", (OPTIMIZER,)),
    "load-optimizer": ("load", (OPTIMIZER,)),
}
"""Each moving step: its verb and the parts it moves."""
NEEDS_LOADED = ("train", "checkpoint")
"""Steps that need every part on the device."""
STEP_NAMES = ("train", *MOVES, "rollout", "checkpoint")

PRESETS: dict[str, str] = {
    "double-offload": "train,offload,load,train,offload,offload,load,train",
    "load-without-offload": "train,load,train,offload,load,train",
    "offload-optimizer-only": "train,offload-optimizer,load-optimizer,train,offload,load,train",
    "checkpoint-between": "train,offload,load,checkpoint,train,checkpoint,offload,load,train",
    "validate-without-refit": "train,offload,rollout,offload,rollout,load,train",
}
"""Named sequences, each the shape of a reported bug: an offload called again by a
validation step without a refit or a retried rollout; a load before any offload (a
colocated role that wakes first); the optimizer moved alone (a role that keeps its
parameters); a checkpoint saved between phases (verl #5665's host growth); a validation
that offloads the already offloaded actor again."""

_PART_WORDS = {PARAMS: "parameters", OPTIMIZER: "optimizer"}
_ORDINALS = ("second", "third", "fourth", "fifth")


def parse_sequence(value: str | Iterable[str]) -> tuple[str, ...]:
    """A preset's steps, or the steps of a comma-separated list (or of a list of names);
    exit 2 on an unknown step or a sequence that cannot run (:func:`check`)."""
    if isinstance(value, str):
        text = value.strip()
        if text in PRESETS:
            text = PRESETS[text]
        names = [s.strip() for s in text.split(",")] if text else []
    else:
        names = [str(s).strip() for s in value]
    if not names:
        raise UsageError("--sequence is empty: give steps such as train,offload,load,train")
    for number, name in enumerate(names, 1):
        if not name:
            raise UsageError(f"--sequence: step {number} is empty")
    for name in names:
        if name not in STEP_NAMES:
            raise UsageError(
                f"--sequence step {name!r} is not a step or a preset: steps are "
                + ", ".join(STEP_NAMES)
                + "; presets are "
                + ", ".join(PRESETS)
            )
    steps = tuple(names)
    check(steps)
    return steps


def check(steps: Sequence[str]) -> None:
    """Exit 2 where a step needs every part on the device and one is offloaded, or where
    no load follows an offload (nothing to measure a round trip by)."""
    verbs = [MOVES[s][0] for s in steps if s in MOVES]
    if "offload" not in verbs or "load" not in verbs[verbs.index("offload") :]:
        raise UsageError(
            "--sequence needs an offload and a load after it: add offload,load "
            "(e.g. train,offload,load,train)"
        )
    offloaded: dict[str, int] = {}
    for number, name in enumerate(steps, 1):
        if name in MOVES:
            verb, parts = MOVES[name]
            for part in parts:
                if verb == "offload":
                    offloaded.setdefault(part, number)
                else:
                    offloaded.pop(part, None)
        elif name in NEEDS_LOADED and offloaded:
            part, since = next(iter(offloaded.items()))
            raise UsageError(
                f"--sequence step {number} ({name}) needs every part on the device, but the "
                f"{_PART_WORDS[part]} are offloaded since step {since}: put a load before it"
            )


def preset_name(steps: Sequence[str]) -> str | None:
    """The preset these steps are, if any."""
    text = ",".join(steps)
    return next((name for name, value in PRESETS.items() if value == text), None)


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """One step of a sequence, as verdicts name it."""

    number: int
    """From 1."""
    name: str
    unusual: str | None = None
    """How a move repeats the state it asks for: ``second in a row`` (an offload of what
    is offloaded, a load of what a load already brought back), ``without an offload``
    (a load of what was never offloaded); a part's name leads where only one part repeats."""

    @property
    def verb(self) -> str | None:
        return MOVES[self.name][0] if self.name in MOVES else None

    @property
    def parts(self) -> tuple[str, ...]:
        return MOVES[self.name][1] if self.name in MOVES else ()

    @property
    def label(self) -> str:
        """``step 6, offload (second in a row)``."""
        text = f"step {self.number}, {self.name}"
        return f"{text} ({self.unusual})" if self.unusual else text


def _ordinal(count: int) -> str:
    return _ORDINALS[count - 2] if count - 2 < len(_ORDINALS) else f"{count}th"


def steps_of(names: Sequence[str]) -> list[Step]:
    """The sequence's steps, each move that repeats its part's state said so."""
    # per part: the verb of its last move and how many of them in a row (0: never moved)
    last: dict[str, tuple[str, int]] = {PARAMS: ("load", 0), OPTIMIZER: ("load", 0)}
    steps = []
    for number, name in enumerate(names, 1):
        unusual = None
        if name in MOVES:
            verb, parts = MOVES[name]
            words = {}
            for part in parts:
                previous, count = last[part]
                if previous == verb:
                    words[part] = (
                        "without an offload"
                        if verb == "load" and count == 0
                        else f"{_ordinal(count + 1)} in a row"
                    )
                    last[part] = (verb, count + 1)
                else:
                    last[part] = (verb, 1)
            if words and len(set(words.values())) == 1 and len(words) == len(parts):
                unusual = next(iter(words.values()))
            elif words:
                unusual = "; ".join(f"{_PART_WORDS[p]} {w}" for p, w in words.items())
        steps.append(Step(number=number, name=name, unusual=unusual))
    return steps


def phase_count(steps: Sequence[str], moves_optimizer: bool) -> int:
    """How many phases a sequence records (for progress bars): one per step, a part's
    moves one each (the optimizer's only where its strategy moves anything)."""
    count = 0
    for name in steps:
        parts = MOVES[name][1] if name in MOVES else (PARAMS,)
        count += sum(1 for p in parts if p == PARAMS or moves_optimizer)
    return count


def train_phases(steps: Sequence[str], cycles: int) -> int:
    """How many train phases the no-offload reference needs: each train step and one after
    the end (the fixed cycle: one per cycle and one after the last load)."""
    return (sum(1 for s in steps if s == "train") if steps else cycles) + 1
