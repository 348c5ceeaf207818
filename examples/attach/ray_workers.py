"""Ray workers under ``offloadprobe attach``: the bootstrap reaches them through
``runtime_env`` environment variables (what an existing cluster's workers get; a local
one's would inherit them anyway).

    offloadprobe attach --phase pack=helper_task:pack_shard -- python ray_workers.py

The driver passes on the two variables attach set, PYTHONPATH (the bootstrap folder
first) and OFFLOADPROBE_JOB, with this folder added so the workers import
``helper_task``. Each task's ``pack_shard`` call is then recorded in its worker process.
"""

import os
from pathlib import Path

import ray

HERE = str(Path(__file__).resolve().parent)


@ray.remote
def pack(nbytes: int) -> int:
    import helper_task

    return helper_task.pack_shard(nbytes)


def main() -> None:
    env_vars = {k: os.environ[k] for k in ("PYTHONPATH", "OFFLOADPROBE_JOB") if k in os.environ}
    env_vars["PYTHONPATH"] = os.pathsep.join(p for p in (env_vars.get("PYTHONPATH"), HERE) if p)
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": env_vars})
    print("ray: packed", ray.get([pack.remote(32 * 1024**2) for _ in range(2)]), flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
