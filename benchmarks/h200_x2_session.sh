#!/usr/bin/env bash
# One lease on 2 x H200 (kind nvidia-h200-x2): two queues, one per GPU, run side by side.
# Usage: bash benchmarks/h200_x2_session.sh A|B  (results under $OUT, logs too)
# Each queue pins its processes to one GPU with CUDA_VISIBLE_DEVICES; the two GPUs share
# the host, so host bandwidth and the cgroup are shared (said in the committed notes).
set -u
FINAL=${OUT:-benchmarks/results}
OUT=$(mktemp -d)  # everything lands here, then travels as one archive
D=h200-$(date +%F)
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
part=${1:-A}
if [ "$part" = A ]; then
  ( export CUDA_VISIBLE_DEVICES=0
    timeout 200 python3 -W ignore -m pytest tests/gpu -q -p no:cacheprovider > "$OUT/$D-gpu-tests.log" 2>&1
    echo "gpu tests exit $?" >> "$OUT/$D-gpu-tests.log"
    timeout 330 python3 -W ignore -m offloadprobe compare naive lazy registered --device cuda --payload 5GiB \
      --cycles 3 --no-reference-check --json "$OUT/$D-compare-5gib.json" \
      --trace "$OUT/$D-compare-timeline.json.gz" --plot "$OUT/$D-compare-timeline.png" \
      > "$OUT/$D-compare-5gib.log" 2>&1
    echo "compare exit $?" >> "$OUT/$D-compare-5gib.log"
    timeout 60 python3 -W ignore benchmarks/fingerprint_cost.py --size 5GiB --device cuda \
      --out "$OUT/$D-fingerprint-cost.json" > "$OUT/$D-fingerprint.log" 2>&1
  ) &
  ( export CUDA_VISIBLE_DEVICES=1
    python3 -W ignore -m offloadprobe alloc-conf --json "$OUT/$D-alloc-conf.json" > "$OUT/$D-alloc-conf.log" 2>&1
    timeout 540 python3 -W ignore benchmarks/field_strategies.py --parts params,optimizer --out "$OUT" \
      > "$OUT/$D-field-a.log" 2>&1
    echo "field exit $?" >> "$OUT/$D-field-a.log"
  ) &
  wait
else
  ( export CUDA_VISIBLE_DEVICES=0
    timeout 200 python3 -W ignore -m pytest tests/gpu -q -p no:cacheprovider > "$OUT/$D-gpu-tests.log" 2>&1
    echo "gpu tests exit $?" >> "$OUT/$D-gpu-tests.log"
    timeout 240 python3 -W ignore benchmarks/sampler_overhead.py --payload 5GiB --device cuda --repetitions 3 \
      --out "$OUT/$D-sampler-overhead.json" > "$OUT/$D-sampler.log" 2>&1
    echo "sampler exit $?" >> "$OUT/$D-sampler.log"
    timeout 240 python3 -W ignore benchmarks/field_strategies.py --parts pipelined --out "$OUT" \
      > "$OUT/$D-field-pipelined.log" 2>&1
  ) &
  ( export CUDA_VISIBLE_DEVICES=1
    timeout 440 python3 -W ignore benchmarks/field_strategies.py --parts alloc --out "$OUT" \
      > "$OUT/$D-field-alloc.log" 2>&1
    echo "field exit $?" >> "$OUT/$D-field-alloc.log"
    timeout 120 python3 -W ignore -m offloadprobe compare tms --device cuda --payload 5GiB \
      --cycles 3 --no-reference-check --json "$OUT/$D-compare-tms-5gib.json" \
      > "$OUT/$D-compare-tms.log" 2>&1
    echo "compare exit $?" >> "$OUT/$D-compare-tms.log"
  ) &
  wait
fi
tail -n 4 "$OUT"/*.log
rm -f "$OUT"/.field-*.json
tar -C "$OUT" -czf "$FINAL/results-$part.tar.gz" . && ls -la "$OUT"
