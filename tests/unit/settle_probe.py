"""The measurement of ``test_emulated_settle``: torch and the emulation only (it runs as
well in a fresh interpreter, ``python -c "import tests.unit.settle_probe as t;
print(t.measure())"``)."""

MIB = 1 << 20


def measure() -> dict:
    """Host figure growth over an offload of 32 MiB of heap-sized device tensors."""
    import torch

    from offloadprobe.engine.runtime import emulation
    from offloadprobe.engine.runtime.device_memory import rss
    from offloadprobe.engine.runtime.glibc_malloc import MMAP_THRESHOLD
    from offloadprobe.engine.runtime.session import Runtime

    # GIVEN 32 MiB of device tensors below glibc's mmap threshold (heap memory)
    runtime = Runtime(device="cpu", emulated=True, note=None)
    size = MMAP_THRESHOLD // 8
    count = 32 * MIB // size
    with emulation.emulated_device() as memory:
        device = [torch.ones(size // 4, device="cuda") for _ in range(count)]
        runtime.settle()
        before = rss() - memory.constant
        # WHEN an offload copies them to the host and frees their device storages
        host = [t.cpu() for t in device]
        for t in device:
            t.untyped_storage().resize_(0)
        runtime.settle()
        after = rss() - memory.constant
        freed = all(not memory.resident(t) for t in device)
    return {
        "grew": after - before,
        "copied": count * size,
        "freed": freed,
        "held": len(host) == count,
    }
