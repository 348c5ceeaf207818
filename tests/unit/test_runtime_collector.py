"""A run collects cyclic garbage as training does, whatever the CLI's entry point did for
its imports (it turns the collector off while torch and megatron-core are imported)."""

import gc
import weakref

import pytest


class _Node:
    me: object = None


@pytest.fixture
def collector_off_nothing_frozen():
    """The state the CLI's entry point leaves before a run: collection off, nothing frozen
    (this worker's own frozen objects are frozen again afterwards)."""
    gc.unfreeze()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def test_a_run_collects_and_hands_the_entry_points_state_back(collector_off_nothing_frozen):
    from offloadprobe.engine.runtime import open_runtime

    with open_runtime("cpu", 1):
        assert gc.isenabled()
        assert gc.get_freeze_count() > 0  # what the imports made is out of the way
        garbage = _Node()
        garbage.me = garbage  # a reference cycle: only the cyclic collector frees it
        gone = weakref.ref(garbage)
        del garbage
        gc.collect()
        assert gone() is None  # the run's own garbage is not frozen with the imports
    assert not gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_a_caller_that_collects_keeps_collecting():
    from offloadprobe.engine.runtime import open_runtime

    frozen = gc.get_freeze_count()
    with open_runtime("cpu", 1):
        assert gc.isenabled()
    assert gc.isenabled() and gc.get_freeze_count() >= frozen
