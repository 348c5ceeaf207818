"""The tree watcher's view of one process across polls, on a fake ``psutil.Process``
and a fake image reader: what each poll reads is set by the test (exact)."""

from offloadprobe.attach.images import Image
from offloadprobe.attach.tree import TreeWatcher

PYTHON = (["/usr/bin/python3", "train.py"], "/usr/bin/python3.12")


class _Proc:
    """A process whose ``cmdline()`` and ``exe()`` read what the test last set."""

    pid = 4242

    def __init__(self, cmdline, exe):
        self.cmdline_now, self.exe_now = cmdline, exe

    def cmdline(self):
        return list(self.cmdline_now)

    def ppid(self):
        return 1

    def exe(self):
        return self.exe_now


def _watcher(*reads):
    """The watcher after ``_update`` saw each ``(cmdline, exe[, image token])`` in turn."""
    token = ["first"]
    watcher = TreeWatcher(1, groups=None, image_reader=lambda pid: Image(7, token[0]))
    proc = _Proc(*reads[0][:2])
    for read in reads:
        proc.cmdline_now, proc.exe_now = read[:2]
        token[0] = read[2] if len(read) > 2 else token[0]
        watcher._update(proc, "process tree")
    return watcher


def _polls(*reads):
    """What the last poll that learnt anything saw."""
    return _watcher(*reads).latest(_Proc.pid)


def test_a_poll_that_reads_nothing_keeps_the_python_flag():
    seen = _polls(PYTHON, ([], ""))
    assert seen.python and seen.command == "/usr/bin/python3 train.py"


def test_a_new_executable_read_mid_exec_is_believed():
    """Mid-exec the new image's executable can read before its arguments do: an empty
    cmdline beside a non-Python executable is that program, not the Python it was."""
    assert not _polls(PYTHON, ([], "/usr/bin/nvidia-smi")).python
    assert _polls(PYTHON, ([], "/usr/bin/python3.12")).python


def test_the_latest_readable_cmdline_decides():
    assert not _polls(PYTHON, ([], ""), (["/bin/sh", "-c", "true"], "/usr/bin/dash")).python
    assert _polls((["/bin/sh"], "/usr/bin/dash"), PYTHON).python


def test_each_image_of_a_pid_is_kept_apart():
    """An exec in the same pid, with the same command line: a second entry, by image."""
    watcher = _watcher((*PYTHON, "a"), (*PYTHON, "b"), (*PYTHON, "b"))
    assert sorted(watcher.seen) == [(4242, "a"), (4242, "b")]
    assert {s.image for s in watcher.seen.values()} == {"a", "b"}
    assert all(s.python and s.command == "/usr/bin/python3 train.py" for s in watcher.seen.values())
