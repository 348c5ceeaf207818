"""The probe model's parts outside the DDP buffers (``--frozen-fraction``, ``--ref-model``).

RL jobs hold more than the DDP-wrapped policy: a frozen reference policy for the KL term,
usually not wrapped, and, with LoRA, frozen base weights that DDP leaves out of its
buffers. Strategies receive both the way frameworks pass them, in the list of model
chunks (``ProbeModel.offload_chunks``: the DDP chunks, then the reference model's), and
must move them parameter by parameter. Each part is named by its residency owner:

- ``frozen``: the policy's frozen parameters;
- ``ref_model``: every parameter of the reference model.

Both are read from the modules as they are when asked, by name, not from tensors saved
when the model was built: a strategy may put another ``nn.Parameter`` in a module's
``_parameters`` (a ``.to()`` under torch's overwrite-on-conversion mode does), and the
model computes with that one, so that one is what is checked, counted and audited. A
frozen parameter no module holds any more under its name is left out (and reported by
the round-trip check).

Torch-free at import.
"""

from __future__ import annotations

from typing import Any

from offloadprobe.engine.model.buffers import nbytes

FROZEN = "frozen"
REF_MODEL = "ref_model"
PARTS = (FROZEN, REF_MODEL)
WORDS = {FROZEN: "frozen parameters", REF_MODEL: "reference model"}


def _plain(name: str) -> str:
    """A DDP chunk's parameter name as its GPTModel names it (``module.`` prefixes off)."""
    while name.startswith("module."):
        name = name.removeprefix("module.")
    return name


def frozen_names(model: Any) -> list[str]:
    """Names of the policy's frozen parameters, as the build froze them (``0.``-prefixed
    by chunk where there are several chunks)."""
    return [name for name, _ in getattr(model, "frozen", [])]


def live_frozen(model: Any) -> list[tuple[str, Any]]:
    """``(name, parameter)`` of each frozen parameter a DDP chunk's modules hold now."""
    wanted = set(frozen_names(model))
    if not wanted:
        return []
    chunks = getattr(model, "chunks", [])
    live: dict[str, Any] = {}
    for index, chunk in enumerate(chunks):
        prefix = f"{index}." if len(chunks) > 1 else ""
        for name, param in chunk.named_parameters():
            full = prefix + _plain(name)
            if full in wanted:
                live.setdefault(full, param)
    return [(name, live[name]) for name in frozen_names(model) if name in live]


def named(model: Any) -> list[tuple[str, str, Any]]:
    """``(part, parameter name, parameter)`` of every parameter outside the DDP buffers,
    as the modules hold them now."""
    found = [(FROZEN, name, p) for name, p in live_frozen(model)]
    for index, chunk in enumerate(getattr(model, "ref_chunks", [])):
        prefix = f"{index}." if index else ""
        found += [(REF_MODEL, prefix + name, p) for name, p in chunk.named_parameters()]
    return found


def part_bytes(model: Any) -> dict[str, int]:
    """Bytes each part holds (logical sizes: the same before and after an offload)."""
    totals: dict[str, int] = {}
    for part, _, param in named(model):
        totals[part] = totals.get(part, 0) + nbytes(param)
    return totals
