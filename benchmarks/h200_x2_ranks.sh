#!/usr/bin/env bash
# Runs over several ranks on one lease of 2 x H200 (kind nvidia-h200-x2), both GPUs per
# step, steps one after another. Usage: bash benchmarks/h200_x2_ranks.sh 1|2
# Results (JSON + logs) travel back as one archive: $OUT/ranks-<part>.tar.gz.
set -u
FINAL=${OUT:-benchmarks/results}
OUT=$(mktemp -d)
D=h200x2-$(date +%F)
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
if ! python3 -c "import megatron.core" 2>/dev/null; then
  pip install --quiet --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
  export PYTHONPATH=/tmp/site:$PWD
fi
part=${1:-1}
if [ "$part" = 1 ]; then
  timeout 280 python3 -W ignore -m pytest tests/gpu -q -p no:cacheprovider > "$OUT/$D-gpu-tests.log" 2>&1
  echo "gpu tests exit $?" >> "$OUT/$D-gpu-tests.log"
  timeout 290 python3 -W ignore -m offloadprobe compare naive lazy registered --device cuda \
    --payload 5GiB --cycles 3 --no-reference-check --nproc-per-node 2 \
    --json "$OUT/$D-ranks-compare-5gib.json" > "$OUT/$D-ranks-compare-5gib.log" 2>&1
  echo "compare exit $?" >> "$OUT/$D-ranks-compare-5gib.log"
elif [ "$part" = 2 ]; then
  timeout 120 python3 -W ignore -m pytest tests/gpu/test_ranks_cuda.py -q -p no:cacheprovider \
    > "$OUT/$D-gpu-tests-ranks.log" 2>&1
  echo "gpu tests exit $?" >> "$OUT/$D-gpu-tests-ranks.log"
  timeout 200 python3 -W ignore -m offloadprobe compare naive lazy registered --device cuda \
    --payload 5GiB --cycles 3 --no-reference-check --nproc-per-node 2 \
    --json "$OUT/$D-ranks-compare-5gib.json" > "$OUT/$D-ranks-compare-5gib.log" 2>&1
  echo "compare exit $?" >> "$OUT/$D-ranks-compare-5gib.log"
  timeout 110 python3 -W ignore -m offloadprobe repro ci-node --device cuda \
    --json "$OUT/$D-repro-ci-node.json" > "$OUT/$D-repro-ci-node.log" 2>&1
  echo "repro exit $?" >> "$OUT/$D-repro-ci-node.log"
  timeout 140 python3 -W ignore -m offloadprobe repro node-6635-master-param --device cuda \
    --json "$OUT/$D-repro-node-6635.json" > "$OUT/$D-repro-node-6635.log" 2>&1
  echo "repro exit $?" >> "$OUT/$D-repro-node-6635.log"
else
  timeout 330 python3 -W ignore benchmarks/ranks_projection_validation.py --device cuda \
    --out "$OUT/$D-ranks-projection.json" > "$OUT/$D-ranks-projection.log" 2>&1
  echo "projection exit $?" >> "$OUT/$D-ranks-projection.log"
  timeout 240 python3 -W ignore benchmarks/sampler_overhead.py --device cuda --payload 5GiB \
    --out "$OUT/$D-sampler-overhead-idle-priority.json" > "$OUT/$D-sampler.log" 2>&1
  echo "sampler exit $?" >> "$OUT/$D-sampler.log"
fi
tail -n 6 "$OUT"/*.log
tar -C "$OUT" -czf "$FINAL/ranks-$part.tar.gz" . && ls -la "$OUT"
