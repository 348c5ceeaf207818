"""Functions the small attach test jobs call (wrapped by --phase in the tests)."""

KEPT = []


def spike(nbytes: int) -> int:
    """A transient: ``nbytes`` written and freed inside the call."""
    block = bytearray(nbytes)
    return len(block)


def keep(nbytes: int) -> int:
    """``nbytes`` written and kept after the call."""
    KEPT.append(bytearray(nbytes))
    return nbytes


def block(nbytes: int) -> int:
    """A transient inside the job's own ``offloadprobe.phase("block")``: what a framework
    that marks its phases in its code does (no --phase needed)."""
    import offloadprobe

    with offloadprobe.phase("block"):
        return spike(nbytes)


def to_memfd(nbytes: int) -> int:
    """A copy written into a memfd and kept after the call: host memory that no RSS shows
    (the bytes are written through ``write``, never mapped). The buffer is 1 MiB, reused."""
    import os

    fd = os.memfd_create("offload-copy")
    chunk = b"\x01" * (1 << 20)
    for _ in range(nbytes // len(chunk)):
        os.write(fd, chunk)
    KEPT.append(fd)
    return fd


def fail(message: str) -> None:
    raise RuntimeError(message)


def outer(nbytes: int) -> int:
    """A transient of twice ``nbytes`` freed, then spike(nbytes): an outer call whose own
    peak comes before its inner call's."""
    first = bytearray(2 * nbytes)
    del first
    return spike(nbytes)


class Mover:
    def offload(self, nbytes: int) -> int:
        return spike(nbytes)


def child_main(nbytes: int) -> None:
    """What a multiprocessing child runs (spawn or fork)."""
    spike(nbytes)
