"""Strategies that offload ``param_data`` yet keep device memory no part of the model or
the optimizer owns: the audit (which walks the model and the optimizer) cannot see it;
the device ledger (totals from the allocator, live tensors walked) must.

Each keeps ``keep_bytes`` on the device (class attribute, so a test sets the truth) where
its docstring says. Plugged in as ``tests.integration.device_stash_strategies:X``.
"""

from __future__ import annotations

import torch

from offloadprobe.plugin import ddp_buffers, free_storage, restore_storage

CACHE: list[torch.Tensor] = []
"""A module-level cache (like a library's workspace cache) the strategy fills."""


class _Honest:
    """Offloads every DDP buffer to a host copy and brings it back: correct on its own."""

    keep_bytes = 7 * 2**20
    """Over the staging allowance at the payload the tests run (4 MiB + 16 MiB / 8) and
    under half of it, so the drop of the offload alone looks like a full offload: only
    the ledger sees what stayed."""

    def __init__(self) -> None:
        self.host: dict[int, torch.Tensor] = {}

    def offload(self, models):
        for i, buffer in enumerate(ddp_buffers(models)):
            self.host[i] = buffer.param_data.detach().to("cpu", copy=True)
            free_storage(buffer.param_data)
            free_storage(buffer.grad_data)
        self.keep(models)

    def load(self, models):
        for i, buffer in enumerate(ddp_buffers(models)):
            restore_storage(buffer.param_data)
            restore_storage(buffer.grad_data)
            buffer.param_data.copy_(self.host[i])
            buffer.grad_data.zero_()

    def keep(self, models) -> None:
        pass

    def device(self, models) -> torch.device:
        return next(iter(ddp_buffers(models))).param_data.device


class StashInAttribute(_Honest):
    """A device tensor of ``keep_bytes`` on the strategy itself, made at each offload."""

    def keep(self, models) -> None:
        self.stash = torch.ones(self.keep_bytes, dtype=torch.uint8, device=self.device(models))


class StashInModuleCache(_Honest):
    """A device tensor of ``keep_bytes`` in a module-level list, made at the first offload."""

    def keep(self, models) -> None:
        if not CACHE:
            CACHE.append(torch.ones(self.keep_bytes, dtype=torch.uint8, device=self.device(models)))


class StashInAutogradGraph(_Honest):
    """``keep_bytes`` held only by a saved tensor of an autograd node (PyTorch keeps the
    tensor's Python object alive with it, so the walk still names it)."""

    def keep(self, models) -> None:
        x = torch.ones(self.keep_bytes // 4, device=self.device(models), requires_grad=True)
        self.node = (x * x).grad_fn  # saves x; the tensor objects go away


class StashAsStorage(_Honest):
    """``keep_bytes`` held by a bare ``UntypedStorage`` object, no tensor over it."""

    def keep(self, models) -> None:
        t = torch.ones(self.keep_bytes, dtype=torch.uint8, device=self.device(models))
        self.raw = t.untyped_storage()


class SmallStagingBuffer(_Honest):
    """A staging buffer of 1 MiB kept on the device: within the staging allowance, ok."""

    keep_bytes = 2**20

    def keep(self, models) -> None:
        if not hasattr(self, "staging"):
            self.staging = torch.empty(
                self.keep_bytes, dtype=torch.uint8, device=self.device(models)
            )
