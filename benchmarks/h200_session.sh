#!/usr/bin/env bash
# One lease on the lent H200: every GPU benchmark and the GPU tests, results under $OUT.
# Run from the repository root with megatron-core on PYTHONPATH (see README, "GPU runs").
set -u
OUT=${OUT:-benchmarks/results}
D=${MACHINE:-h200}-$(date +%F)
export PYTHONUNBUFFERED=1
# GPU tests in their own processes alongside: every reading they assert is per process.
timeout 330 python3 -m pytest tests/gpu -q -p no:cacheprovider > "$OUT/$D-gpu-tests.log" 2>&1 &
tests=$!
timeout 150 python3 -W ignore benchmarks/optimizer_offload.py --out "$OUT" 2>&1 | tail -7
timeout 190 python3 -W ignore benchmarks/projection_validation.py --cycles 2 \
    --out "$OUT/$D-projection-validation.json" 2>&1 | tail -14
timeout 100 python3 -W ignore -m offloadprobe repro scenarios/verl-6635-master-param.toml \
    --device cuda --cycles 1 --json "$OUT/$D-repro-verl-6635.json" 2>&1 | tail -12
wait "$tests"; echo "gpu tests exit $?"; tail -4 "$OUT/$D-gpu-tests.log"
