"""User strategies that act where the zero of the host figures is taken (issue 35, point 4).

Each docstring gives the true figure the run must report (P = the param_data payload), or
the verdict it must fail with. Plugged in as ``tests.integration.zero_strategies:X``.
"""

import mmap

import torch

from tests.integration.adversarial_strategies import Pageable

GRAB = 8 * 2**20
"""Host bytes ``GrabsInFirstTrain`` takes, every page written."""
PAGE = 4096


def written(nbytes):
    """An anonymous mapping of ``nbytes``, every page written (resident until it is closed:
    by construction, whatever the allocator's thresholds)."""
    block = mmap.mmap(-1, nbytes)
    for start in range(0, nbytes, PAGE):
        block[start] = 1
    return block


class GrabsInFirstTrain(Pageable):
    """Pageable, and a global forward hook, registered when built, that takes ``GRAB``
    bytes of host memory at the first forward of cycle 0's train phase (every page
    written) and keeps them: true steady P + GRAB, true peak at least that."""

    size = GRAB

    def __init__(self):
        super().__init__()
        self.grabbed = None
        self.hook = torch.nn.modules.module.register_module_forward_hook(self._grab)

    def _grab(self, module, args, output):
        if self.grabbed is None:
            self.grabbed = written(self.size)
            self.hook.remove()

    def close(self):
        self.hook.remove()


class GrabsMoreInFirstTrain(GrabsInFirstTrain):
    """The same with 256 MiB (a GPU run's first train phase grows the host by more)."""

    size = 256 * 2**20


BEFORE_THE_RUN = []
"""Host memory the process held before the strategies ran (a test puts ``written(n)``
blocks here)."""


class FreesWhatWasThereBefore(Pageable):
    """Pageable, and frees at its first offload host memory the process held before any
    strategy code ran (``BEFORE_THE_RUN``, filled by the test): the host ends below the
    zero, an inconsistency, exit 1."""

    def offload(self, models):
        super().offload(models)
        BEFORE_THE_RUN.clear()
