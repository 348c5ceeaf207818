"""The helper process ``train_offload.py --helper`` starts: ``python helper.py NBYTES``."""

import sys

from helper_task import pack_shard

if __name__ == "__main__":
    print(f"helper: packed {pack_shard(int(sys.argv[1]))} pages", flush=True)
