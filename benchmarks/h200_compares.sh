#!/usr/bin/env bash
# offloadprobe's own compare and repro recipes on the H200, one step after another.
# Usage: bash benchmarks/h200_compares.sh STEP...   (see benchmarks/h200_common.sh)
#   make-run         `make run`'s recipe at 8 MiB on the GPU ($D-make-run-gpu.log)
#   make-run-1gib    the same at 1 GiB ($D-make-run-gpu-1gib.log)
#   timeline         the README's 5 GiB compare with its trace and plot ($D-compare-timeline.*)
#   5gib             the 5 GiB compare with the reference check ($D-compare-5gib.json)
#   tms              torch_memory_saver's strategy at 5 GiB ($D-compare-tms-5gib.json)
#   optimizer-first  registered + mcore/complete optimizer, optimizer first ($D-mcore-optimizer-first.json)
#   repro-6635       verl issue 6635 reproduced ($D-repro-verl-6635.json)
# Run from the repository root (megatron-core, cupti-python, torch_memory_saver importable
# or in .whl/).
. "$(dirname "$0")/h200_common.sh"
P="python3 -W ignore -m offloadprobe"
THREE="naive lazy registered"
step_make_run() {
  step make-run-gpu 60 $P compare $THREE --payload 8MiB --cycles 2 --max-host-peak 2.5x \
    --expect naive=over-budget
}
step_make_run_1gib() {
  step make-run-gpu-1gib 60 $P compare $THREE --payload 1GiB --cycles 2 --max-host-peak 2.5x \
    --expect naive=over-budget
}
step_timeline() {
  step compare-timeline 150 $P compare $THREE --device cuda --payload 5GiB --cycles 3 \
    --no-reference-check --no-progress --json "$OUT/$D-compare-timeline.json" \
    --trace "$OUT/$D-compare-timeline.json.gz" --plot "$OUT/$D-compare-timeline.png"
}
step_5gib() {
  step compare-5gib 150 $P compare $THREE --device cuda --payload 5GiB --cycles 3 \
    --no-progress --json "$OUT/$D-compare-5gib.json"
}
step_tms() {
  step compare-tms 90 $P compare tms --device cuda --payload 5GiB --cycles 3 \
    --no-reference-check --json "$OUT/$D-compare-tms-5gib.json"
}
step_optimizer_first() {
  step mcore-optimizer-first 120 $P compare registered --optimizer-strategy mcore \
    --optimizer-strategy complete --precision-aware --optimizer-first --device cuda \
    --payload 1GiB --cycles 2 --json "$OUT/$D-mcore-optimizer-first.json"
}
step_repro_6635() {
  step repro-verl-6635 90 $P repro scenarios/verl-6635-master-param.toml --device cuda \
    --cycles 1 --json "$OUT/$D-repro-verl-6635.json"
}
versions | tee -a "$OUT/$D-steps.log"
run_steps "$@"
