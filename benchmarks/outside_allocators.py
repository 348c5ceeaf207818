"""What PyTorch's counters and CUPTI's records each see of memory made outside PyTorch.

One process, on a GPU: start offloadprobe's CUPTI recorder, then make a torch device
tensor, a torch pinned tensor, a CuPy device array, a CuPy pinned block and a numpy
array page-locked with ``cudaHostRegister``, each of a known size; after each, read
PyTorch's counters and the recorder's live bytes. Writes JSON with the versions.

    python benchmarks/outside_allocators.py --out benchmarks/results/h200-DATE-outside.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from offloadprobe.measure import cupti_memory

MiB = 2**20


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    note = cupti_memory.start()  # before CUDA is first used
    import numpy as np
    import torch

    recorder = cupti_memory.active()
    torch.cuda.init()
    rows = []

    def read(what: str, device: int, pinned: int) -> None:
        torch.cuda.synchronize()
        row = {
            "made": what,
            "true_device_bytes": device,
            "true_pinned_bytes": pinned,
            "torch_reserved": torch.cuda.memory_reserved(),
            "torch_host_allocator": int(
                torch.cuda.host_memory_stats().get("allocated_bytes.current", 0)
                or torch.cuda.host_memory_stats().get("reserved_bytes.current", 0)
            ),
        }
        free, total = torch.cuda.mem_get_info()
        row["driver_used_less_reserved"] = total - free - row["torch_reserved"]
        if recorder is not None:
            recorder.flush()
            row["cupti_device_live"] = recorder.log.live(cupti_memory.DEVICE)
            row["cupti_pinned_live"] = recorder.log.live(cupti_memory.PINNED)
            row["cupti_locked_live"] = recorder.log.live(cupti_memory.LOCKED)  # with callbacks
        rows.append(row)
        print(json.dumps(row))

    keep = []
    device = pinned = 0
    read("nothing yet", device, pinned)
    keep.append(torch.empty(64 * MiB, dtype=torch.uint8, device="cuda"))
    device += 64 * MiB
    read("torch device 64 MiB", device, pinned)
    keep.append(torch.empty(16 * MiB, dtype=torch.uint8, pin_memory=True))
    pinned += 16 * MiB
    read("torch pinned 16 MiB", device, pinned)
    try:
        import cupy

        keep.append(cupy.empty(32 * MiB, dtype=cupy.uint8))
        device += 32 * MiB
        read("cupy device 32 MiB", device, pinned)
        keep.append(cupy.cuda.alloc_pinned_memory(8 * MiB))
        pinned += 8 * MiB
        read("cupy pinned (cudaHostAlloc) 8 MiB", device, pinned)
    except ImportError:
        print("CuPy not installed: its rows are skipped")
    array = np.ones(4 * MiB, dtype=np.uint8)
    assert int(torch.cuda.cudart().cudaHostRegister(array.ctypes.data, array.nbytes, 0)) == 0
    pinned += 4 * MiB
    read("numpy + cudaHostRegister 4 MiB", device, pinned)
    torch.cuda.cudart().cudaHostUnregister(array.ctypes.data)
    pinned -= 4 * MiB
    read("cudaHostUnregister 4 MiB", device, pinned)
    doc = {
        "machine": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "recorder": note,
        "why_not": None if recorder else cupti_memory.why_not(),
        "rows": rows,
    }
    try:
        from importlib.metadata import version

        doc["cupti_python"] = version("cupti-python")
    except Exception:
        doc["cupti_python"] = None
    args.out.write_text(json.dumps(doc, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
