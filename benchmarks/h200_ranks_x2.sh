#!/usr/bin/env bash
# Runs over several ranks on one lease of 2 x H200 (kind nvidia-h200-x2), both GPUs per
# step, one step after another. Usage: MACHINE=h200x2 bash benchmarks/h200_ranks_x2.sh STEP...
# (see benchmarks/h200_common.sh; the GPU tests: benchmarks/h200_gpu_tests.sh)
#   compare          naive, lazy, registered at 5 GiB over 2 ranks ($D-ranks-compare-5gib.json)
#   repro-ci-node    the ci-node scenario reproduced ($D-repro-ci-node.json)
#   repro-node-6635  the node-6635-master-param scenario ($D-repro-node-6635.json)
#   projection       benchmarks/ranks_projection_validation.py ($D-ranks-projection.json)
# Run from the repository root (megatron-core importable or in .whl/).
. "$(dirname "$0")/h200_common.sh"
P="python3 -W ignore -m offloadprobe"
step_compare() {
  step ranks-compare-5gib 200 $P compare naive lazy registered --device cuda --payload 5GiB \
    --cycles 3 --no-reference-check --nproc-per-node 2 --json "$OUT/$D-ranks-compare-5gib.json"
}
step_repro_ci_node() {
  step repro-ci-node 110 $P repro ci-node --device cuda --json "$OUT/$D-repro-ci-node.json"
}
step_repro_node_6635() {
  step repro-node-6635 140 $P repro node-6635-master-param --device cuda \
    --json "$OUT/$D-repro-node-6635.json"
}
step_projection() {
  step ranks-projection 300 python3 -W ignore benchmarks/ranks_projection_validation.py \
    --device cuda --out "$OUT/$D-ranks-projection.json"
}
versions | tee -a "$OUT/$D-steps.log"
run_steps "$@"
