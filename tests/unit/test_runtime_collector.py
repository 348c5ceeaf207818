"""A run collects cyclic garbage as training does, whatever the CLI's entry point did for
its imports (it collects seldom while torch and megatron-core are imported)."""

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
    default = gc.get_threshold()
    collector.unfreeze_objects()
    collector.pause_for_imports()
    try:
        yield default
    finally:
        collector.end_pause()
        collector.freeze_objects()
        gc.set_threshold(*default)


def _cycle() -> weakref.ref:
    garbage = _Node()
    garbage.me = garbage  # a reference cycle: only the cyclic collector frees it
    return weakref.ref(garbage)


def test_the_pause_collects_the_youngest_generation_seldom(entry_point_state):
    assert collector.paused()
    assert gc.get_threshold()[0] == collector.IMPORT_THRESHOLD > entry_point_state[0]
    assert gc.isenabled()  # still collecting, every IMPORT_THRESHOLD allocations


def test_a_run_resumes_the_collection_the_entry_point_paused(entry_point_state):
    from offloadprobe.engine.runtime import open_runtime

    with open_runtime("cpu", 1):
        assert gc.get_threshold() == entry_point_state and not collector.paused()
        assert gc.get_freeze_count() > 0  # CPU emulation: the long-lived objects are frozen
        made_in_the_run = _cycle()
        gc.collect()
        assert made_in_the_run() is None  # the run's own objects are not frozen
    assert gc.get_threshold() == entry_point_state  # the process goes on as it should


def test_resume_frees_what_the_imports_left_and_freezes_only_when_asked(entry_point_state):
    left = _cycle()  # garbage made while paused, as importing torch leaves some
    collector.resume(freeze=False)  # CUDA: nothing frozen, as in any training process
    assert left() is None  # the baseline holds no garbage the imports left
    assert gc.get_threshold() == entry_point_state and gc.get_freeze_count() == 0


def test_end_pause_puts_the_thresholds_back_without_collecting(entry_point_state):
    left = _cycle()
    collector.end_pause()  # a command that never started real work
    assert gc.get_threshold() == entry_point_state and not collector.paused()
    assert left() is not None  # nothing collected on the way out
    collector.resume()  # nothing paused any more: a no-op
    assert gc.get_freeze_count() == 0


def test_a_caller_that_turned_collection_off_keeps_it_off():
    from offloadprobe.engine.runtime import open_runtime

    gc.disable()
    try:
        collector.pause_for_imports()
        assert not collector.paused()
        with open_runtime("cpu", 1):
            assert not gc.isenabled()
    finally:
        gc.enable()


def test_resume_without_a_pause_changes_nothing():
    frozen, threshold = gc.get_freeze_count(), gc.get_threshold()
    collector.resume()
    assert gc.get_freeze_count() == frozen and gc.get_threshold() == threshold
