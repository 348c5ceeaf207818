"""A small job (no torch) for attach's tests: ``python small_job.py ACTION...``.

Actions run in order: ``spike:N``, ``keep:N``, ``mover:N``, ``outer:N``, ``block:N``
(spike inside the job's own ``offloadprobe.phase("block")``), ``torch`` (prints whether
torch is imported, and the name of every module imported),
``fail:MSG`` (raises out of the job), ``spawn:N`` / ``fork:N`` (a multiprocessing child
calls spike(N)), ``isolated`` (a Python child started with -I, which ignores PYTHONPATH:
never instrumented), ``envonly:N`` (a child started with ONLY PYTHONPATH and
OFFLOADPROBE_JOB in its environment, as a Ray worker given them through runtime_env),
``touch:PATH`` (the job started), ``sleep:S``, ``exit:N``; and three that try to hide
from attach: ``memfd:N`` (to_memfd(N), then prints the memfd's allocated bytes as its
``fstat`` gives them), ``reexec:S`` (executes itself again, the bootstrap's two
variables dropped, and sleeps S seconds in the new image), ``escape:PROCS`` (writes its
own pid into the ``cgroup.procs`` file PROCS, then prints its memory cgroup).
"""

import multiprocessing
import os
import subprocess
import sys

import attach_target

HERE = os.path.dirname(os.path.abspath(__file__))


def main(actions):
    for action in actions:
        verb, _, arg = action.partition(":")
        if verb == "spike":
            attach_target.spike(int(arg))
        elif verb == "keep":
            attach_target.keep(int(arg))
        elif verb == "mover":
            attach_target.Mover().offload(int(arg))
        elif verb == "outer":
            attach_target.outer(int(arg))
        elif verb == "block":
            attach_target.block(int(arg))
        elif verb == "torch":
            print("small_job: torch imported:", "torch" in sys.modules, flush=True)
            print("small_job: modules", " ".join(sorted(sys.modules)), flush=True)
        elif verb == "fail":
            attach_target.fail(arg)
        elif verb in ("spawn", "fork"):
            ctx = multiprocessing.get_context(verb)
            child = ctx.Process(target=attach_target.child_main, args=(int(arg),))
            child.start()
            child.join()
            assert child.exitcode == 0, child.exitcode
        elif verb == "isolated":
            code = "import time; time.sleep(1.5)"  # many polls, on a loaded host too
            subprocess.run([sys.executable, "-I", "-c", code], check=True)
        elif verb == "envonly":
            env = {k: os.environ[k] for k in ("PYTHONPATH", "OFFLOADPROBE_JOB")}
            code = (
                f"import sys; sys.path.insert(0, {HERE!r}); import attach_target; "
                f"attach_target.spike({int(arg)})"
            )
            subprocess.run([sys.executable, "-c", code], env=env, check=True)
        elif verb == "memfd":
            fd = attach_target.to_memfd(int(arg))
            print("small_job: memfd bytes", os.fstat(fd).st_blocks * 512, flush=True)
        elif verb == "reexec":
            env = {
                k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OFFLOADPROBE_JOB")
            }
            argv = [sys.executable, os.path.abspath(__file__), f"sleep:{arg}"]
            os.execve(sys.executable, argv, env)
        elif verb == "escape":
            with open(arg, "w") as procs:
                procs.write(str(os.getpid()))
            with open("/proc/self/cgroup") as cgroup:
                line = next(x for x in cgroup if ":memory:" in x or x.startswith("0::"))
            print("small_job: cgroup now", line.strip().split(":", 2)[2], flush=True)
        elif verb == "touch":
            open(arg, "w").close()
        elif verb == "sleep":
            import time

            time.sleep(float(arg))
        elif verb == "exit":
            print("small_job: exiting", arg, flush=True)
            sys.exit(int(arg))
    print("small_job: done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
