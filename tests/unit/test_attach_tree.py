"""The tree watcher's view of one process across polls, on a fake ``psutil.Process``:
what each poll reads is set by the test (exact)."""

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


def _polls(*reads):
    """The watcher's record after ``_update`` saw each ``(cmdline, exe)`` in turn."""
    watcher = TreeWatcher(1, procs_file=None)
    proc = _Proc(*reads[0])
    for cmdline, exe in reads:
        proc.cmdline_now, proc.exe_now = cmdline, exe
        watcher._update(proc, "process tree")
    return watcher.seen[proc.pid]


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
