#!/usr/bin/env bash
# One H200 call for the truth issue: what CUPTI and PyTorch's counters each see of memory
# made outside PyTorch, the GPU tests, and the README's 5 GiB compare re-measured.
# Run from the repository root with megatron-core and cupti-python on PYTHONPATH
# (docs/h200-results.md, "How they were produced"). Results go under $OUT.
set -u
OUT=${OUT:-benchmarks/results}
D=${MACHINE:-h200}-$(date +%F)
export PYTHONUNBUFFERED=1
python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, sys.version.split()[0])"
timeout 60 python3 benchmarks/outside_allocators.py --out "$OUT/$D-outside-allocators.json" 2>&1 | tail -12
timeout 330 python3 -m pytest tests/gpu -q -p no:cacheprovider -n 3 -rs > "$OUT/$D-gpu-tests.log" 2>&1
echo "gpu tests exit $?"; grep -E "passed|failed|FAILED|Error" "$OUT/$D-gpu-tests.log" | tail -25
timeout 170 python3 -W ignore -m offloadprobe compare naive lazy registered --device cuda \
    --payload 5GiB --cycles 3 --no-progress --json "$OUT/$D-compare-5gib.json" \
    > "$OUT/$D-compare-5gib.log" 2>&1
echo "compare exit $?"; head -40 "$OUT/$D-compare-5gib.log"
timeout 100 python3 -W ignore benchmarks/fingerprint_cost.py --size 5GiB --repeats 5 --torch-ops \
    --out "$OUT/$D-fingerprint-cost.json" 2>&1 | tail -8
