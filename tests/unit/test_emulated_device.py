"""CPU emulation puts a tensor where a GPU would: every way torch moves a tensor counts.

GIVEN the emulated device (no megatron shims) and one host and one device tensor,
WHEN a tensor is made by any of torch's calls that, on a GPU, put the result on the GPU
(``.cuda()``, ``.to(...)`` with a device, a device tensor or a type, ``torch.as_tensor``,
``Tensor.type`` with a dtype or a CUDA type name, ``*_like``, dtype conversions),
THEN the result is emulated device memory exactly when it would be CUDA memory on a GPU,
and the emulated device grew by its bytes. A strategy cannot hide a load or an offload by
choosing a spelling the emulation does not know.
"""

from __future__ import annotations

import pytest
import torch

from offloadprobe.engine.runtime import emulation

N = 4096


# (name, make(host, device) -> tensor, on the device on a GPU?)
CASES = [
    ("h.cuda()", lambda h, d: h.cuda(), True),
    ("h.to('cuda')", lambda h, d: h.to("cuda"), True),
    ("h.to(d.device)", lambda h, d: h.to(d.device), True),
    ("h.to(d)", lambda h, d: h.to(d), True),
    ("h.to(d, copy=True)", lambda h, d: h.to(d, copy=True), True),
    (
        "h.to(device='cuda', dtype=bf16)",
        lambda h, d: h.to(device="cuda", dtype=torch.bfloat16),
        True,
    ),
    ("as_tensor(h, device='cuda')", lambda h, d: torch.as_tensor(h, device="cuda"), True),
    ("as_tensor(h, device=d.device)", lambda h, d: torch.as_tensor(h, device=d.device), True),
    ("tensor(list, device='cuda')", lambda h, d: torch.tensor([1.0] * N, device="cuda"), True),
    ("h.type('torch.cuda.FloatTensor')", lambda h, d: h.type("torch.cuda.FloatTensor"), True),
    ("h.type(torch.cuda.FloatTensor)", lambda h, d: h.type(torch.cuda.FloatTensor), True),
    ("d.type(torch.float64)", lambda h, d: d.type(torch.float64), True),
    ("d.type('torch.cuda.DoubleTensor')", lambda h, d: d.type("torch.cuda.DoubleTensor"), True),
    ("d.to(torch.float64)", lambda h, d: d.to(torch.float64), True),
    ("d.double()", lambda h, d: d.double(), True),
    ("d.to(h.double())", lambda h, d: d.to(h.double()), False),
    ("zeros_like(d)", lambda h, d: torch.zeros_like(d), True),
    ("d.cpu()", lambda h, d: d.cpu(), False),
    ("d.to('cpu')", lambda h, d: d.to("cpu"), False),
    ("d.to(h)", lambda h, d: d.to(h), False),
    ("d.type('torch.FloatTensor')", lambda h, d: d.type("torch.FloatTensor"), False),
    ("d.type(torch.FloatTensor)", lambda h, d: d.type(torch.FloatTensor), False),
    ("as_tensor(d, device='cpu')", lambda h, d: torch.as_tensor(d, device="cpu"), False),
    ("h.type(torch.float64)", lambda h, d: h.type(torch.float64), False),
    ("h.to(torch.float64)", lambda h, d: h.to(torch.float64), False),
    ("h.clone()", lambda h, d: h.clone(), False),
]
NOT_COPIES = {"zeros_like(d)", "tensor(list, device='cuda')"}


@pytest.mark.parametrize(("name", "make", "on_gpu"), CASES, ids=[c[0] for c in CASES])
def test_a_result_is_device_memory_exactly_where_a_gpu_would_put_it(name, make, on_gpu):
    with emulation.emulated_device() as memory:
        host = torch.arange(N, dtype=torch.float32)
        device = host.cuda()
        before = memory.allocated_bytes
        out = make(host, device)
        if name not in NOT_COPIES:
            assert torch.equal(out.cpu(), host.to(out.dtype))  # the same values, wherever
        assert emulation.on_device(out) is on_gpu
        assert (out.device.type == "cuda") is on_gpu
        grown = memory.allocated_bytes - before
        if on_gpu and out.untyped_storage()._cdata != device.untyped_storage()._cdata:
            assert grown >= out.numel() * out.element_size()
        if not on_gpu:
            assert grown == 0


def test_a_device_tensor_moved_to_its_own_place_is_itself():
    with emulation.emulated_device():
        device = torch.arange(N, dtype=torch.float32).cuda()
        moved = [
            device.cuda(),
            device.to("cuda"),
            device.to(device),
            device.type(torch.float32),
            torch.as_tensor(device, device="cuda"),
        ]
        for same in moved:
            assert same.untyped_storage()._cdata == device.untyped_storage()._cdata


@pytest.mark.parametrize("numel", [0, N])
@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("h.to('cuda')", lambda h, d: h.to("cuda")),
        ("h.to(0)", lambda h, d: h.to(0)),
        ("h.to(cuda, fp16)", lambda h, d: h.to(torch.device("cuda"), torch.float16)),
        ("h.to(d)", lambda h, d: h.to(d)),
        ("h.to(d, False, True)", lambda h, d: h.to(d, False, True)),
        ("h.to('cuda', fp16, False, True)", lambda h, d: h.to("cuda", torch.float16, False, True)),
        ("h.type(torch.cuda.FloatTensor)", lambda h, d: h.type(torch.cuda.FloatTensor)),
        ("as_tensor(h, device='cuda')", lambda h, d: torch.as_tensor(h, device="cuda")),
    ],
)
def test_positional_forms_and_empty_tensors_move_to_the_device(name, make, numel):
    with emulation.emulated_device():
        host = torch.arange(numel, dtype=torch.float32)
        out = make(host, torch.ones(1).cuda())
        assert out.device.type == "cuda" and emulation.on_device(out) == (numel > 0)
        assert out.numel() == numel


def test_positional_copy_back_to_the_host():
    with emulation.emulated_device():
        host = torch.arange(N, dtype=torch.float32)
        device = host.cuda()
        back = device.to(host, False, False)
        assert not emulation.on_device(back) and back.device.type == "cpu"
        assert torch.equal(back, host)


def test_an_empty_device_tensor_is_device_memory_when_it_grows():
    # a storage made empty on the device and grown later is device memory, as on a GPU
    with emulation.emulated_device() as memory:
        for empty in (torch.empty(0, device="cuda"), torch.zeros(0, device="cuda")):
            assert empty.device.type == "cuda"
            before = memory.allocated_bytes
            empty.untyped_storage().resize_(N * 4)
            assert memory.allocated_bytes - before == N * 4 and emulation.on_device(empty)


def test_type_as_and_storage_moves_land_where_a_gpu_puts_them():
    with emulation.emulated_device() as memory:
        host = torch.arange(N, dtype=torch.float32)
        device = host.cuda()
        assert emulation.on_device(host.type_as(device))
        assert not emulation.on_device(device.type_as(host))
        assert device.type_as(device) is device
        before = memory.allocated_bytes
        clone = device.untyped_storage().clone()
        assert memory.holds_storage(clone) and memory.allocated_bytes - before == N * 4
        back = device.untyped_storage().cpu()
        assert not memory.holds_storage(back)
        assert back._cdata != device.untyped_storage()._cdata and back.nbytes() == N * 4
        up = host.untyped_storage().cuda()
        assert memory.holds_storage(up) and up.nbytes() == N * 4
        assert device.untyped_storage().cuda()._cdata == device.untyped_storage()._cdata
        grown = device.untyped_storage().new()
        before = memory.allocated_bytes
        grown.resize_(N * 4)
        assert memory.holds_storage(grown) and memory.allocated_bytes - before == N * 4


def test_a_device_tensor_grown_by_tensor_resize_grows_the_device():
    with emulation.emulated_device() as memory:
        device = torch.arange(N, dtype=torch.float32).cuda()
        before = memory.allocated_bytes
        device.resize_(2 * N)
        assert memory.allocated_bytes - before == N * 4
        other = torch.zeros(3 * N).cuda()
        before = memory.allocated_bytes
        device.resize_as_(torch.empty(3 * N))
        assert memory.allocated_bytes - before == N * 4 and memory.reconcile() == 0
        assert other.numel() == 3 * N


def test_a_thread_sees_the_device_as_the_main_thread_does():
    from concurrent.futures import ThreadPoolExecutor

    with emulation.emulated_device(), ThreadPoolExecutor(1) as pool:
        host = torch.arange(N, dtype=torch.float32)
        device = host.cuda()
        back = pool.submit(lambda: device.to("cpu")).result()
        assert not emulation.on_device(back) and torch.equal(back, host)
        assert back.untyped_storage()._cdata != device.untyped_storage()._cdata
        with emulation.strategy_code():
            kept = pool.submit(lambda: torch.cat([device])).result()
        assert emulation.on_device(kept)


def test_a_free_and_regrowth_behind_the_registry_is_counted_where_the_address_moved():
    # torch._C.StorageBase.resize_ bypasses the registry; reconcile finds a size change,
    # and a free plus regrowth to the same size by the moved address (here the old
    # address is still taken when the storage grows again)
    with emulation.emulated_device() as memory:
        device = torch.zeros(1 << 20).cuda()
        storage = device.untyped_storage()
        torch._C.StorageBase.resize_(storage, 0)
        assert memory.reconcile() == 4 << 20
        storage.resize_(4 << 20)  # through the registry again
        assert memory.reconcile() == 0
        torch._C.StorageBase.resize_(storage, 0)
        squatter = torch.ones(1 << 20)  # takes the freed pages' address
        torch._C.StorageBase.resize_(storage, 4 << 20)
        assert memory.reconcile() == 4 << 20
        assert squatter.sum() == 1 << 20


def test_device_pages_that_left_rss_behind_the_registry_are_counted_and_restored():
    # pages dropped where the registry cannot see (here madvise; a free and regrowth at
    # the same address leaves them unwritten the same way) are found by mincore, counted
    # as changed behind the registry, and made resident again, as the constant counts them
    from offloadprobe.engine.runtime.host_pages import drop, owned_pages, resident

    with emulation.emulated_device() as memory:
        device = torch.ones(1 << 20).cuda()
        storage = device.untyped_storage()
        start, pages = owned_pages(storage.data_ptr(), storage.nbytes())
        drop(start, pages // 2)
        assert resident(start, pages) == pages - pages // 2
        assert memory.reconcile() == 4 << 20 and memory.bypassed_bytes == 4 << 20
        assert resident(start, pages) == pages and memory.reconcile() == 0
