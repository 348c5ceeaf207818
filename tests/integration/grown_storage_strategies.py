"""Strategies that hide the parameters in device storages the audit already knows or the
ledger takes as the framework's, grown under their tensors; and one that parks them in
``grad_data``. Each round trip is bit-exact: only the device figures can tell.

Cycle 0 offloads honestly to a host copy; load 0 grows the chosen storage and keeps a
copy of ``param_data`` in its tail; later offloads copy into the tail and keep nothing on
the host. Plugged in as ``tests.integration.grown_storage_strategies:X``."""

from __future__ import annotations

import gc

import torch

from offloadprobe.plugin import ddp_buffers, free_storage, nbytes, restore_storage

try:  # made when the module is imported, before the strategy is built
    MODULE_TENSOR = torch.zeros(1, dtype=torch.uint8, device="cuda")
except (RuntimeError, AssertionError):  # no device yet (imported outside a run)
    MODULE_TENSOR = None


def _bytes(tensor):
    return tensor.view(-1).view(torch.uint8)


def _over(storage):
    raw = torch.empty(0, dtype=torch.uint8)
    return raw.set_(storage, 0, (storage.nbytes(),))


class _Grower:
    def __init__(self):
        self.host, self.offsets = {}, None

    def storage(self, models):
        raise NotImplementedError

    def offload(self, models):
        buffers = list(ddp_buffers(models))
        for i, b in enumerate(buffers):
            if self.offsets is None:
                self.host[i] = b.param_data.detach().to("cpu", copy=True)
            else:
                at = self.offsets[i]
                _over(self.storage(models))[at : at + nbytes(b.param_data)].copy_(
                    _bytes(b.param_data)
                )
            free_storage(b.param_data)
            free_storage(b.grad_data)

    def load(self, models):
        buffers = list(ddp_buffers(models))
        for b in buffers:
            restore_storage(b.param_data)
            restore_storage(b.grad_data)
            b.grad_data.zero_()
        if self.offsets is None:
            storage = self.storage(models)
            end = storage.nbytes()
            storage.resize_(end + sum(nbytes(b.param_data) for b in buffers))
            self.offsets = []
            for i, b in enumerate(buffers):
                b.param_data.copy_(self.host.pop(i))
                _over(storage)[end : end + nbytes(b.param_data)].copy_(_bytes(b.param_data))
                self.offsets.append(end)
                end += nbytes(b.param_data)
            return
        for i, b in enumerate(buffers):
            at = self.offsets[i]
            _bytes(b.param_data).copy_(_over(self.storage(models))[at : at + nbytes(b.param_data)])


class GrowModuleTensor(_Grower):
    """The copy in the tail of a one-byte device tensor this module made at import."""

    def storage(self, models):
        return MODULE_TENSOR.untyped_storage()


class GrowOptimizerState(_Grower):
    """The copy in the tail of one ``exp_avg``'s storage (the tensor's view unchanged), run
    with ``--optimizer-strategy none``: the state stays on the device by design."""

    def storage(self, models):
        if not hasattr(self, "_storage"):
            optimizer = next(
                o for o in gc.get_objects() if type(o).__name__ == "DistributedOptimizer"
            )
            state = next(s for s in optimizer.optimizer.state.values() if "exp_avg" in s)
            self._storage = state["exp_avg"].untyped_storage()
        return self._storage


class ParkInGradData:
    """``param_data``'s bytes parked in ``grad_data`` (fp32: twice the room), which is never
    freed: nothing leaves the device."""

    def offload(self, models):
        for b in ddp_buffers(models):
            _bytes(b.grad_data)[: nbytes(b.param_data)].copy_(_bytes(b.param_data))
            free_storage(b.param_data)

    def load(self, models):
        for b in ddp_buffers(models):
            restore_storage(b.param_data)
            _bytes(b.param_data).copy_(_bytes(b.grad_data)[: nbytes(b.param_data)])
            b.grad_data.zero_()
