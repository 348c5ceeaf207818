"""The parent's side of the zygote on a fake zygote process (a shell script that answers as
``engine.zygote`` does): a worker whose pid the kernel reused from an earlier, reaped
worker of the same zygote is running, not ended with the earlier one's status."""

from __future__ import annotations

import os
import stat

from offloadprobe.isolation.zygote import Zygote

# ready; the first worker starts and ends; the second gets the first one's pid (the pid
# space wrapped: 32768 pids by default, and every thread of every process takes one)
FAKE = """#!/bin/sh
echo '{"ready": 1}'
read request
echo '{"started": 4242}'
echo '{"ended": 4242, "status": 0}'
read request
echo '{"started": 4242}'
read request
"""


def test_a_reused_pid_is_a_running_worker_not_the_earlier_ones_end(tmp_path):
    fake = tmp_path / "zygote.sh"
    fake.write_text(FAKE)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    made = Zygote(dict(os.environ), python=str(fake))
    try:
        assert made.wait_ready(timeout_s=10)
        first = made.fork({"job": "a"})
        assert first is not None and first.wait(timeout=10) == 0
        second = made.fork({"job": "b"})
        assert second is not None and second.pid == first.pid
        assert second.poll() is None  # it runs: the 0 was the first worker's
    finally:
        made.close()
