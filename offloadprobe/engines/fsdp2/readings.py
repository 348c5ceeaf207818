"""What FSDP2's offload does to host memory, read where the offload code cannot reach.

Four readings the field's FSDP offloads need and nobody reports:

- **pinning per shard** (:func:`shard_homes`): after an offload, where each parameter
  shard's and optimizer moment's bytes are, and whether CUDA says that memory is
  page-locked (``Tensor.is_pinned()``, ``cudaPointerGetAttributes`` underneath). A
  tensor whose storage was freed in place has its bytes wherever the strategy says
  (``host_copy``); that slice's pinning is still CUDA's answer, not the strategy's;
- **the rounding** (:func:`pinned_now`): the bytes PyTorch's caching host allocator owns
  (``host_memory_stats``, both key schemas through ``core.pinned_stats``) over the bytes
  the offload asked for (the pinned homes' own sizes);
- **held while training**: the same owned figure read after the load, when the blocks
  are back in the allocator's cache and stay page-locked through the train step;
- **glibc's residue** (:class:`HostResidue`): host RSS after the load over its value
  just before the offload. The process's own malloc is left as it is (nothing here sets
  a threshold); :func:`glibc_share` trims the free heap once, at the end, to say how much
  of what stayed was glibc's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from offloadprobe.core import pinned_stats
from offloadprobe.engines.fsdp2.strategies.common import fsdp_params, local_tensor, param_groups
from offloadprobe.measure.probes.host import read_status

Home = Literal["device", "host", "nowhere"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ShardHome:
    """Where one shard's (or moment's) bytes are after an offload."""

    key: str
    """``fc1.weight`` for a parameter shard, ``fc1.weight/exp_avg`` for its moment."""
    nbytes: int
    """Bytes of the tensor holding them (a padded shard's whole storage)."""
    home: Home
    pinned: bool
    """CUDA says the host memory is page-locked (False on the device, or nowhere)."""


def _is_device(tensor: Any) -> bool:
    return bool(tensor.device.type != "cpu")


def _home(
    key: str,
    tensor: Any,
    strategy: Any | None,
    is_device: Callable[[Any], bool],
) -> ShardHome:
    tensor = local_tensor(tensor)
    storage = tensor.untyped_storage()
    if storage.nbytes() and is_device(tensor):
        return ShardHome(key=key, nbytes=storage.nbytes(), home="device", pinned=False)
    if not storage.nbytes():
        copy = getattr(strategy, "host_copy", None)
        held = copy(tensor) if callable(copy) else None
        if held is None:
            return ShardHome(key=key, nbytes=0, home="nowhere", pinned=False)
        tensor, nbytes = held, held.numel() * held.element_size()
    else:
        nbytes = storage.nbytes()
    return ShardHome(key=key, nbytes=nbytes, home="host", pinned=bool(tensor.is_pinned()))


def shard_homes(
    model: Any,
    optimizer: Any | None = None,
    strategies: Iterable[Any] = (),
    is_device: Callable[[Any], bool] = _is_device,
) -> list[ShardHome]:
    """Every parameter shard of the model and every moment of the optimizer, by key.

    ``strategies`` are asked (``host_copy``) only for a tensor whose storage was freed in
    place; ``is_device`` says whether a tensor's bytes are device memory (a CUDA tensor's
    by default; the emulated device's registry in CPU emulation).
    """
    moved = list(strategies)
    names = {id(p): name for name, p in model.named_parameters()}
    homes = []
    shards = list(fsdp_params(model))
    if shards:
        for fsdp_param in shards:
            key = names.get(id(fsdp_param.sharded_param), fsdp_param._param_fqn)
            homes.append(_shard(key, fsdp_param.sharded_param, moved, is_device))
    else:  # FSDP1: its flat parameters are the shards
        homes += [_shard(name, p, moved, is_device) for name, p in model.named_parameters()]
    if optimizer is not None:
        for param, state in optimizer.state.items():
            for name, value in state.items():
                if name in ("exp_avg", "exp_avg_sq") and value is not None:
                    key = f"{names.get(id(param), '?')}/{name}"
                    homes.append(_shard(key, value, moved, is_device))
    return homes


def grad_homes(
    model: Any, strategies: Iterable[Any] = (), is_device: Callable[[Any], bool] = _is_device
) -> list[ShardHome]:
    """Every sharded gradient a model offload moved with its shard (``model.to`` moves a
    parameter's ``.grad`` too), by ``<parameter>/grad``: part of what it asked memory for."""
    moved = list(strategies)
    homes = []
    for fsdp_param in fsdp_params(model):
        grad = fsdp_param.sharded_param.grad
        if grad is not None:
            homes.append(_shard(f"{fsdp_param._param_fqn}/grad", grad, moved, is_device))
    return homes


def _shard(key: str, tensor: Any, strategies: list[Any], is_device: Any) -> ShardHome:
    """The first strategy's answer that finds the bytes (the model's or the optimizer's)."""
    homes = [_home(key, tensor, strategy, is_device) for strategy in strategies or [None]]
    return next((h for h in homes if h.home != "nowhere"), homes[0])


@dataclass(frozen=True, kw_only=True, slots=True)
class Pinning:
    """The shards' pinning after one offload, summed."""

    shards: int
    pinned: int
    """Shards whose host home is page-locked."""
    on_host: int
    on_device: int
    requested_pinned: int
    """Bytes of the pinned homes: what the offload asked page-locked memory for."""
    host_bytes: int
    """Bytes of every host home, pinned or not."""


def pinning(homes: Iterable[ShardHome]) -> Pinning:
    rows = list(homes)
    return Pinning(
        shards=len(rows),
        pinned=sum(h.pinned for h in rows),
        on_host=sum(h.home == "host" for h in rows),
        on_device=sum(h.home == "device" for h in rows),
        requested_pinned=sum(h.nbytes for h in rows if h.pinned),
        host_bytes=sum(h.nbytes for h in rows if h.home == "host"),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class PinnedNow:
    """PyTorch's caching host allocator, read now (None fields where it cannot be read)."""

    owned: int
    """Bytes of blocks it owns, handed out or cached: what stays page-locked."""
    in_use: int | None
    """Bytes handed out; None where this torch's counters miss frees (torch < 2.13)."""
    cached: int | None
    """``owned - in_use``: blocks back in the cache, held for the rest of the job."""
    schema: str


def pinned_now() -> PinnedNow | None:
    """The allocator's figures (``torch.cuda.host_memory_stats``); None without CUDA."""
    import torch

    if not torch.cuda.is_available() or not hasattr(torch.cuda, "host_memory_stats"):
        return None
    figures = pinned_stats.read(torch.cuda.host_memory_stats(), torch.__version__)
    cached = None if figures.in_use is None else figures.reserved - figures.in_use
    return PinnedNow(
        owned=figures.reserved, in_use=figures.in_use, cached=cached, schema=figures.schema
    )


def rounding(owned: int, requested: int) -> float | None:
    """Pinned bytes owned over pinned bytes asked for; None when nothing was asked."""
    return owned / requested if requested else None


def rss() -> int:
    """This process's resident host bytes (``VmRSS``)."""
    return read_status()["VmRSS"]


@dataclass(slots=True)
class HostResidue:
    """Host RSS after a load over its value just before the offload of the same cycle."""

    before: int = 0

    def start(self) -> None:
        """Just before the offload."""
        self.before = rss()

    def after_load(self) -> int:
        """Bytes still resident after the load that were not before the offload."""
        return max(0, rss() - self.before)


def glibc_share() -> tuple[int, int]:
    """``(rss before, rss after)`` one ``malloc_trim(0)``: what glibc's free heap held.
    It changes the process's heap from here on: read it once, after the last cycle."""
    from offloadprobe.engine.runtime.glibc_malloc import trim_host_heap

    before = rss()
    trim_host_heap()
    return before, rss()


def _walk(obj: Any, path: str, depth: int, found: dict[int, tuple[str, int]]) -> None:
    """Device tensors reachable from ``obj``'s attributes, NamedTuples and lists, each
    storage once, named by the first path that reaches it."""
    import torch

    if isinstance(obj, torch.Tensor):
        tensor = local_tensor(obj)
        storage = tensor.untyped_storage()
        if tensor.device.type != "cpu" and storage.nbytes() and storage.data_ptr():
            found.setdefault(storage.data_ptr(), (path, storage.nbytes()))
        return
    if depth <= 0 or isinstance(obj, (str, bytes, int, float, bool, torch.nn.Module)):
        return
    if isinstance(obj, tuple | list):
        for i, item in enumerate(obj):
            _walk(item, f"{path}[{i}]", depth - 1, found)
    elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("torch.distributed"):
        for name, value in vars(obj).items():
            _walk(value, f"{path}.{name}", depth - 1, found)


def device_owners(model: Any, optimizer: Any | None = None) -> dict[str, int]:
    """Device bytes that the model, its optimizer and FSDP2's own objects still hold, by
    owner: ``sharded_param`` (a shard's padded storage), ``grad``, ``exp_avg``, ``buffer``,
    and whatever else an ``FSDPParam`` or ``FSDPParamGroup`` references, by its attribute
    (``FSDPParam._unsharded_param``, ``FSDPParamGroup.comm_ctx.all_gather_state``, ...).
    Each storage counts once, for the first owner that reaches it; bytes the caller's
    ``memory_allocated`` has beyond the sum belong to no part."""
    from torch.distributed.fsdp import FSDPModule

    found: dict[int, tuple[str, int]] = {}
    for fsdp_param in fsdp_params(model):
        _walk(fsdp_param._sharded_param_data, "sharded_param", 1, found)
        _walk(fsdp_param.sharded_param.grad, "grad", 1, found)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            for group in param_groups(module):
                for fsdp_param in group.fsdp_params:
                    _walk(fsdp_param, "FSDPParam", 3, found)
                _walk(group, "FSDPParamGroup", 4, found)
    for param in model.parameters():
        _walk(param, "parameter", 1, found)
        _walk(param.grad, "grad", 1, found)
    for buffer in model.buffers():
        _walk(buffer, "buffer", 1, found)
    if optimizer is not None:
        for state in optimizer.state.values():
            for key, value in state.items():
                _walk(value, str(key), 1, found)
    owners: dict[str, int] = {}
    for path, nbytes in found.values():
        owner = path.split("[")[0]
        owners[owner] = owners.get(owner, 0) + nbytes
    return owners
