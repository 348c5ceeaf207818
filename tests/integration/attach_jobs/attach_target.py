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


def fail(message: str) -> None:
    raise RuntimeError(message)


class Mover:
    def offload(self, nbytes: int) -> int:
        return spike(nbytes)


def child_main(nbytes: int) -> None:
    """What a multiprocessing child runs (spawn or fork)."""
    spike(nbytes)
