"""verl's ``verl.plugins`` entry point: start this process's attach session when verl is
imported (verl 0.9 loads every entry point of that group in each process that imports
it: its Ray workers too).

Registered in pyproject.toml; harmless where verl is absent (nothing reads the group)
and where ``OFFLOADPROBE_JOB`` is unset (then importing this module imports nothing
else). In a process the ``sitecustomize`` bootstrap already started, it finds that
session.
"""

import os

SESSION = None
if os.environ.get("OFFLOADPROBE_JOB"):
    from offloadprobe.attach import runtime

    SESSION = runtime.activate("verl.plugins")
