"""``nemo_dtensor``: the body of NeMo-RL's DTensor policy worker's ``move_to_cpu`` /
``move_to_cuda`` (``dtensor_policy_worker_v2.py``, read at 7ea279a).

Each module buffer is replaced in place by its copy on the target device
(``torch.utils.swap_tensors``, because FSDP does not move buffers), then the whole model
is moved with a blocking ``model.to(device)``, then ``gc.collect()`` and
``empty_cache()``. Every offload makes one fresh pageable host tensor per shard, dropped
at the load; glibc keeps the pages of those it served from its heap.
"""

from __future__ import annotations

import gc
from typing import Any

from offloadprobe.engine.descriptors import ModelStrategyInfo
from offloadprobe.engines.fsdp2.strategies.common import empty_cache, load_device


class NemoDtensor:
    """Buffers by ``swap_tensors``, then blocking ``model.to``, ``gc.collect()``,
    ``empty_cache()``, both ways."""

    def __init__(self, runtime: Any | None = None) -> None:
        self.runtime = runtime

    def _move(self, model: Any, device: Any) -> None:
        import torch

        with torch.no_grad():
            for buffer in model.buffers():
                moved = buffer.to(device)
                if moved is not buffer:  # already there (a plain CPU run): nothing to swap
                    torch.utils.swap_tensors(buffer, moved)  # type: ignore[no-untyped-call]
            model.to(device)
        gc.collect()
        empty_cache(self.runtime)

    def offload(self, model: Any) -> None:
        self._move(model, "cpu")

    def load(self, model: Any) -> None:
        self._move(model, load_device(self.runtime))


STRATEGY = ModelStrategyInfo(
    engines=("fsdp2",),
    name="nemo_dtensor",
    summary="NeMo-RL DTensor move_to_cpu: blocking model.to (pageable)",
    factory=NemoDtensor,
    emulation="NeMo-RL's body as written: a fresh host copy per shard every offload",
)
