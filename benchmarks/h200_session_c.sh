#!/usr/bin/env bash
# One H200 call (2026-12-01, second session): the first-offload benchmark again, every row
# measured anew (the held-while-training figure of the first session's rows mixed the
# process's RSS with the cgroup's baseline: *-before-held-fix.json), the component
# timings kept. Alone on the machine: it times the host.
# Run from the repository root, megatron-core, cupti-python, torch_memory_saver on PYTHONPATH.
set -u
OUT=${OUT:-benchmarks/results}
D=${MACHINE:-h200}-$(date +%F)
export PYTHONUNBUFFERED=1
python3 - "$D" "$OUT" <<'PY'
import json, sys
day, out = sys.argv[1], sys.argv[2]
doc = json.load(open(f"benchmarks/results/{day}-first-offload-before-held-fix.json"))
doc["rows"] = []  # every row again; the components stand
json.dump(doc, open(f"{out}/{day}-first-offload.json", "w"), indent=1)
PY
timeout ${BUDGET_S:-470} python3 -W ignore benchmarks/first_offload.py --out "$OUT" \
    --budget-s $(( ${BUDGET_S:-470} - 40 )) > "$OUT/$D-first-offload.log" 2>&1
echo "first-offload exit $?"; tail -30 "$OUT/$D-first-offload.log"
