"""User strategies written to fool the meter, one per class of lie (verl's signature).

Each docstring gives the true figure the run must report (P = the param_data payload), or
the verdict it must fail with. Plugged in as ``tests.integration.adversarial_strategies:X``.
"""

import torch


def _buffers(models):
    for chunk in models:
        yield from chunk.buffers


def _free(tensor):
    tensor.untyped_storage().resize_(0)


def _restore(tensor):
    tensor.untyped_storage().resize_(tensor.numel() * tensor.element_size())


def _load_from(buf, copy):
    """Load one DDP buffer: param_data back from ``copy``, grad_data back zeroed."""
    _restore(buf.param_data)
    buf.param_data.copy_(copy)
    _restore(buf.grad_data)
    buf.grad_data.zero_()


class Pageable:
    """Correct: one reused exact-size host copy per buffer. Host peak 1x, steady 1x."""

    def __init__(self):
        self.copies = {}

    def _host(self, buf):
        host = self.copies.get(id(buf))
        if host is None:
            host = self.copies[id(buf)] = torch.empty(
                buf.param_data.shape, dtype=buf.param_data.dtype, device="cpu"
            )
        return host

    def offload(self, models):
        for buf in _buffers(models):
            self._host(buf).copy_(buf.param_data)
            _free(buf.param_data)
            _free(buf.grad_data)

    def load(self, models):
        for buf in _buffers(models):
            _load_from(buf, self.copies[id(buf)])


def _transient(host):
    """A full extra host copy, alive for a moment (a staging buffer, a checksum copy)."""
    scratch = torch.empty(host.shape, dtype=host.dtype, device="cpu")
    scratch.copy_(host)
    del scratch


class TransientAfterFree(Pageable):
    """A transient host copy of P made after the device storage was freed: true peak 2x."""

    def offload(self, models):
        super().offload(models)
        for buf in _buffers(models):
            _transient(self.copies[id(buf)])


class TransientAtLoadStart(Pageable):
    """The same transient at the start of load, before the device is restored: peak 2x."""

    def load(self, models):
        for buf in _buffers(models):
            _transient(self.copies[id(buf)])
        super().load(models)


class CpuFreePin:
    """``.cpu()``, free the device storage, then ``.pin_memory()``, the previous pinned copy
    alive until replaced: 3 host copies at once from the second offload on (true peak 3x,
    steady 1x)."""

    def __init__(self):
        self.pinned = {}

    def offload(self, models):
        for buf in _buffers(models):
            staged = buf.param_data.cpu()
            _free(buf.param_data)
            _free(buf.grad_data)
            self.pinned[id(buf)] = staged.pin_memory()
            del staged

    def load(self, models):
        for buf in _buffers(models):
            _load_from(buf, self.pinned[id(buf)])


class NoOp:
    """Moves nothing, only zeroes the grads: must fail, did not offload."""

    def offload(self, models):
        for buf in _buffers(models):
            buf.grad_data.zero_()

    def load(self, models):
        pass


class CopyWithoutFree:
    """Copies to the host, never frees the device storage: must fail, did not offload."""

    def __init__(self):
        self.copies = {}

    def offload(self, models):
        for buf in _buffers(models):
            self.copies[id(buf)] = buf.param_data.detach().to("cpu", copy=True)

    def load(self, models):
        for buf in _buffers(models):
            buf.param_data.copy_(self.copies[id(buf)])


SWAP_DISTANCE = 65_521


class SwapsTwoWords(Pageable):
    """Swaps two param_data words 65,521 elements apart on load: corrupted, must exit 1."""

    def load(self, models):
        super().load(models)
        words = next(iter(_buffers(models))).param_data.view(torch.int16)
        i = 1000
        while words[i] == words[i + SWAP_DISTANCE]:
            i += 1
        a, b = int(words[i]), int(words[i + SWAP_DISTANCE])
        words[i], words[i + SWAP_DISTANCE] = b, a


def _state(optimizers):
    for opt in optimizers:
        for part in getattr(opt, "chained_optimizers", None) or [opt]:
            if part.optimizer is not None:
                yield from part.optimizer.state.values()


class StateToEmptyHost:
    """Optimizer state: ``exp_avg`` and ``exp_avg_sq`` copied into host tensors made with
    ``torch.empty()`` + ``copy_`` and stored back in the state; the device originals are
    dropped (really moved). With a pageable model strategy the host holds P + 4P (fp32 Adam
    moments of bf16 params): steady about 5x."""

    keys = ("exp_avg", "exp_avg_sq")

    def offload(self, optimizers):
        for state in _state(optimizers):
            for key in self.keys:
                value = state[key]
                host = torch.empty(value.shape, dtype=value.dtype, device="cpu")
                host.copy_(value)
                state[key] = host

    def load(self, optimizers):
        for state in _state(optimizers):
            for key in self.keys:
                state[key] = state[key].cuda()


class StateCopiedButKept(StateToEmptyHost):
    """Like ``StateToEmptyHost`` but keeps every device original alive: nothing really
    left the device: the audit says so, and the run fails (not offloaded)."""

    def __init__(self):
        self.kept = []

    def offload(self, optimizers):
        for state in _state(optimizers):
            self.kept += [state[key] for key in self.keys]
        super().offload(optimizers)

    def load(self, optimizers):
        super().load(optimizers)
        self.kept.clear()


class ZeroesExpAvg:
    """Optimizer strategy that moves nothing and zeroes ``exp_avg`` on load: corrupted."""

    def offload(self, optimizers):
        pass

    def load(self, optimizers):
        for state in _state(optimizers):
            state["exp_avg"].zero_()


class KeepsADeviceCopy:
    """Frees param_data after copying it with ordinary compute (``torch.cat``) that, on a
    GPU, stays on the GPU: the device gets nothing back. Must fail as not offloaded."""

    def __init__(self):
        self.copies = {}

    def offload(self, models):
        for buf in _buffers(models):
            self.copies[id(buf)] = torch.cat([buf.param_data.detach()])
            _free(buf.param_data)
            _free(buf.grad_data)

    def load(self, models):
        for buf in _buffers(models):
            _load_from(buf, self.copies.pop(id(buf)))


class FreesBehindTheEmulation(Pageable):
    """Frees param_data through ``torch._C.StorageBase.resize_``, which the CPU emulation's
    patched ``UntypedStorage.resize_`` never sees (on a GPU the same call is measured): a
    run that cannot be measured must stop, never report figures."""

    def offload(self, models):
        for buf in _buffers(models):
            self._host(buf).copy_(buf.param_data)
            torch._C.StorageBase.resize_(buf.param_data.untyped_storage(), 0)
            _free(buf.grad_data)


class KeepsADeviceCopyInAThread(KeepsADeviceCopy):
    """KeepsADeviceCopy with the copy made in a worker thread."""

    def offload(self, models):
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1) as pool:
            for buf in _buffers(models):
                data = buf.param_data.detach()
                self.copies[id(buf)] = pool.submit(lambda d=data: torch.cat([d])).result()
                _free(buf.param_data)
                _free(buf.grad_data)


class KeepsAStagingBuffer(Pageable):
    """Honest: copies through a device staging buffer of an eighth of the largest buffer,
    made at the first offload and kept for reuse. Every byte reaches the host: ok."""

    def __init__(self):
        super().__init__()
        self.staging = None

    def offload(self, models):
        for buf in _buffers(models):
            flat = buf.param_data.detach().view(-1)
            if self.staging is None:
                self.staging = torch.empty(
                    max(flat.numel() // 8, 1), dtype=flat.dtype, device=flat.device
                )
            host = self._host(buf).view(-1)
            n = self.staging.numel()
            for start in range(0, flat.numel(), n):
                part = flat[start : start + n]
                self.staging[: part.numel()].copy_(part)
                host[start : start + part.numel()].copy_(self.staging[: part.numel()])
            _free(buf.param_data)
            _free(buf.grad_data)


class PreallocatedDeviceCopy(Pageable):
    """Makes a device buffer per DDP buffer when built, copies param_data into it at every
    offload (and to the host, for a plausible host figure), frees param_data: the device
    gives back what it took at construction. Must fail as not offloaded, on a GPU too."""

    def __init__(self):
        super().__init__()
        self.spare = {}
        for buf in _ddp_buffers_alive():
            self.spare[id(buf)] = torch.empty_like(buf.param_data)

    def offload(self, models):
        for buf in _buffers(models):
            self.spare[id(buf)].copy_(buf.param_data)
        super().offload(models)

    def load(self, models):
        for buf in _buffers(models):
            _load_from(buf, self.spare[id(buf)])


def _ddp_buffers_alive():
    """The DDP buffers that exist now (a strategy built before it sees the model)."""
    import gc

    from megatron.core.distributed.param_and_grad_buffer import _ParamAndGradBuffer

    return [o for o in gc.get_objects() if isinstance(o, _ParamAndGradBuffer)]


class PaysWithOptimizerState(KeepsADeviceCopy):
    """Keeps param_data on the device (``torch.cat``) and moves the optimizer's exp_avg to
    the host in the same phase, so the device's net change looks like a move. Must fail."""

    def offload(self, models):
        super().offload(models)
        for state in _adam_states():
            state["exp_avg"] = state["exp_avg"].cpu()

    def load(self, models):
        super().load(models)
        for state in _adam_states():
            state["exp_avg"] = state["exp_avg"].cuda()


def _adam_states():
    import gc

    return [
        s
        for o in gc.get_objects()
        if isinstance(o, torch.optim.Optimizer)
        for s in o.state.values()
        if "exp_avg" in s
    ]
