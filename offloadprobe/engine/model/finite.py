"""How many elements of a tensor are not finite (+inf, -inf or NaN), read on its real device.

A fingerprint says that bytes changed, not what they became. An optimizer moment set to
+inf where the batch does not reach changes no parameter yet (Adam's update there is
``0 / inf = 0``), and breaks the first step whose batch reaches it; a check that finds a
changed optimizer tensor says whether it now holds non-finite values, so the report
names them for what they are.

Counted in slices of ``STEP`` elements (one boolean slice at a time on the device, never a
temporary of the tensor's size), with ``__torch_function__`` off (in CPU emulation every op
would otherwise pass through the emulated device: this is the tool's own reading). Integer
tensors (``step`` counts, int16 remainders) hold no non-finite values: 0, without a read.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from offloadprobe.engine.runtime.emulation import real_device

STEP = 1 << 22
"""Elements per slice: 4 MiB of booleans at a time."""


def _counted(tensor: torch.Tensor) -> torch.Tensor | None:
    """The count of ``tensor``'s non-finite elements, left on its device (None: not a float)."""
    if not (tensor.is_floating_point() or tensor.is_complex()) or tensor.numel() == 0:
        return None
    flat = tensor.detach().reshape(-1)
    total = torch.zeros((), dtype=torch.int64, device=real_device(flat))
    for start in range(0, flat.numel(), STEP):
        total += torch.isfinite(flat[start : start + STEP]).logical_not().sum()
    return total


def nonfinite_counts(tensors: Iterable[torch.Tensor]) -> list[int]:
    """How many elements of each tensor are +inf, -inf or NaN, in order (0 for integer
    dtypes); the counts are read back once per device."""
    with torch._C.DisableTorchFunction():
        totals = [_counted(t) for t in tensors]
        found = [0] * len(totals)
        for device in {real_device(t) for t in totals if t is not None}:
            mine = [
                (i, t) for i, t in enumerate(totals) if t is not None and real_device(t) == device
            ]
            for (index, _), value in zip(
                mine, torch.stack([t for _, t in mine]).tolist(), strict=True
            ):
                found[index] = int(value)
        return found


def nonfinite(tensor: torch.Tensor) -> int:
    """How many of ``tensor``'s elements are +inf, -inf or NaN (0 for integer dtypes)."""
    return nonfinite_counts([tensor])[0]
