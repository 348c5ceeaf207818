#!/usr/bin/env bash
# The FSDP2 engine through offloadprobe's own CLI on the H200, one step after another.
# Usage: bash benchmarks/h200_fsdp2.sh STEP...   (see benchmarks/h200_common.sh)
#   rows-qwen25-8   the field's FSDP2 rows and the fix, Qwen2.5-7B shapes, rank 7 of 8
#                   ($D-fsdp2-compare-qwen25-8.json)
#   rows-uneven     verl FSDP2 and the fix at 24 shards, where dim 0 does not divide
#                   ($D-fsdp2-compare-uneven-24.json)
#   readings        verl FSDP2's own readings after the offload (shards pinned, uneven,
#                   pinned owned over asked) at 8 and at 24 shards ($D-fsdp2-readings-*.json)
#   truth-tests     the GPU tests of the truth readings: a hung parameter copy, pinning
#                   from a thread pool, pinned in use over cycles
# One GPU plays rank r of N through PyTorch's fake process group: sharding and padding
# are real, collectives are not (each output says so).
. "$(dirname "$0")/h200_common.sh"
P="python3 -W ignore -m offloadprobe"
ROWS="verl_fsdp2+verl_optimizer verl_fsdp2_blocking+verl_optimizer nemo_dtensor+nemo_optimizer cpu_offload_pinned exact+exact_optimizer"
step_rows_qwen25_8() {
  step fsdp2-compare-qwen25-8 330 $P compare $ROWS --engine fsdp2 --preset qwen2.5-7b \
    --layers 12 --shards 8 --shard-rank 7 --cycles 3 --device cuda --no-progress \
    --json "$OUT/$D-fsdp2-compare-qwen25-8.json"
}
step_rows_uneven() {
  step fsdp2-compare-uneven-24 120 $P compare verl_fsdp2+verl_optimizer exact+exact_optimizer \
    --engine fsdp2 --preset qwen2.5-7b --layers 4 --shards 24 --shard-rank 23 --cycles 3 \
    --device cuda --no-progress --json "$OUT/$D-fsdp2-compare-uneven-24.json"
}
step_readings() {
  for n in 8 24; do
    step fsdp2-readings-$n 100 $P run --strategy verl_fsdp2 --optimizer-strategy verl_optimizer \
      --engine fsdp2 --preset qwen2.5-7b --layers 4 --shards $n --shard-rank $((n - 1)) \
      --cycles 2 --device cuda --no-progress --json "$OUT/$D-fsdp2-readings-$n.json"
  done
}
step_truth_tests() {
  step truth-tests 150 python3 -W ignore -m pytest -o addopts="-ra" -p no:cacheprovider -v \
    tests/gpu/test_param_copies_cuda.py tests/gpu/test_pinned_truth_cuda.py
}
versions | tee -a "$OUT/$D-steps.log"
run_steps "$@"
