"""The wire between ``attach``'s parent and the job's processes: names only, stdlib only.

The parent writes one JSON job file and names it in ONE environment variable,
:data:`JOB_ENV`; every Python process of the job that loads the bootstrap reads it and
appends JSON lines to its own stream file in the job's output folder. This module is
imported by the bootstrap in every process of the job, so it imports nothing.

Job file (version :data:`VERSION`)::

    {"version": 2, "job_id": "...", "out_dir": "/path",
     "phases": [{"name": "offload", "module": "m", "qualname": "f", "preset": null}],
     "meter": "offloadprobe-attach-<job id>",
     "reset_gpu_peak": true}

``meter`` names the parent's socket (abstract namespace, ``meter.py``): the process says
hello there, and waits at each call's entry and exit while the parent reads its cgroup.

Stream records, one JSON object a line, each with ``"kind"``:

* ``started``: the process loaded the bootstrap (pid, ppid, host, ranks, argv, how);
* ``wrapped``: a target's module was imported and the function wrapped (``rebound``:
  how many other references to the original were replaced);
* ``skipped``: a target could not be wrapped (``reason``);
* ``call``: one measured call (see ``probe.py`` for the figures);
* ``exit``: the interpreter is exiting normally (``pending``: targets whose module it
  never imported). A process killed, or ended by ``os._exit``, has no ``exit`` record.
"""

JOB_ENV = "OFFLOADPROBE_JOB"
"""The one environment variable the bootstrap reads: the path of the job file."""

VERSION = 2

STREAM_PREFIX = "proc-"
STREAM_SUFFIX = ".jsonl"

STARTED, WRAPPED, SKIPPED, CALL, EXIT = "started", "wrapped", "skipped", "call", "exit"

API_TARGET = "offloadprobe.phase"
"""The target of a call recorded through ``offloadprobe.phase`` rather than a wrapper."""


def stream_name(host: str, pid: int) -> str:
    """A process's stream file: host and pid, so ranks of several nodes may share a folder.
    A pid the kernel reuses within one job appends to the same file after a new
    ``started`` record, which begins a new process there."""
    return f"{STREAM_PREFIX}{host}-{pid}{STREAM_SUFFIX}"
