"""The probe model's parts outside the DDP buffers (``--frozen-fraction``, ``--ref-model``).

RL jobs hold more than the DDP-wrapped policy: a frozen reference policy for the KL term,
usually not wrapped, and, with LoRA, frozen base weights that DDP leaves out of its
buffers. Strategies receive both the way frameworks pass them, in the list of model
chunks (``ProbeModel.offload_chunks``: the DDP chunks, then the reference model's), and
must move them parameter by parameter. Each part is named by its residency owner:

- ``frozen``: the policy's frozen parameters;
- ``ref_model``: every parameter of the reference model.

Torch-free at import.
"""

from __future__ import annotations

from typing import Any

from offloadprobe.engine.model.buffers import nbytes

FROZEN = "frozen"
REF_MODEL = "ref_model"
PARTS = (FROZEN, REF_MODEL)
WORDS = {FROZEN: "frozen parameters", REF_MODEL: "reference model"}


def named(model: Any) -> list[tuple[str, str, Any]]:
    """``(part, parameter name, parameter)`` of every parameter outside the DDP buffers."""
    found = [(FROZEN, name, p) for name, p in getattr(model, "frozen", [])]
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
