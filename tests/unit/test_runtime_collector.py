"""A run collects cyclic garbage as training does, whatever the CLI's entry point did for
its imports (it pauses the collector while torch and megatron-core are imported)."""

import gc
import weakref

import pytest

from offloadprobe.core import collector


class _Node:
    me: object = None


@pytest.fixture
def entry_point_state():
    """The state the CLI's entry point leaves before a run: collection paused, nothing
    frozen (this worker's own frozen objects are frozen again afterwards)."""
    gc.unfreeze()
    collector.pause_for_imports()
    try:
        yield
    finally:
        collector.resume()
        gc.freeze()
        gc.enable()


def _collects_its_own_garbage() -> bool:
    garbage = _Node()
    garbage.me = garbage  # a reference cycle: only the cyclic collector frees it
    gone = weakref.ref(garbage)
    del garbage
    gc.collect()
    return gone() is None


def test_a_run_resumes_the_collection_the_entry_point_paused(entry_point_state):
    from offloadprobe.engine.runtime import open_runtime

    assert not gc.isenabled() and collector.paused()
    with open_runtime("cpu", 1):
        assert gc.isenabled() and not collector.paused()
        assert gc.get_freeze_count() > 0  # what the imports made is out of the way
        assert _collects_its_own_garbage()  # the run's own objects are not frozen
    assert gc.isenabled()  # the process goes on collecting


def test_a_caller_that_turned_collection_off_keeps_it_off():
    from offloadprobe.engine.runtime import open_runtime

    gc.disable()
    try:
        with open_runtime("cpu", 1):
            assert not gc.isenabled()
    finally:
        gc.enable()


def test_resume_without_a_pause_changes_nothing():
    frozen = gc.get_freeze_count()
    collector.resume()
    assert gc.isenabled() and gc.get_freeze_count() == frozen
