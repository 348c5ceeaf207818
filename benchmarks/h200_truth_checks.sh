#!/usr/bin/env bash
# Whether offloadprobe's figures are the truth, on the H200 (kind nvidia-h200), one step
# after another: every figure is per process. Usage: bash benchmarks/h200_truth_checks.sh
# [STEP...]; without steps, the truth issue's (35) checks after its parts landed (pinned-
# truth make-run-gpu truth-cpu-tests gpu-tests), all into one archive,
# $OUT/$D-truth-checks.tar.gz, beside $D-truth-checks-steps.log.
#   pinned-truth       benchmarks/pinned_truth.py: the pinned-memory routes
#   make-run-gpu       `make run`'s recipe on the GPU at 1 GiB
#   truth-cpu-tests    the CPU emulation's last-word, rank-cgroup and adversarial tests on
#                      this host's own cgroup v2
#   gpu-tests          the GPU tests the parts touch (GPU_TESTS)
#   outside-allocators benchmarks/outside_allocators.py: what CUPTI and PyTorch's counters
#                      each see of memory made outside PyTorch ($D-outside-allocators.json)
#   alloc-conf         offloadprobe alloc-conf ($D-alloc-conf.json)
#   projection         benchmarks/projection_validation.py, 2 cycles ($D-projection-validation.json)
# (see benchmarks/h200_common.sh; .whl/ carried: megatron-core, cupti-python, pyelftools)
FINAL=${OUT:-benchmarks/results}
ARCHIVE=0
if [ $# -eq 0 ]; then
  set -- pinned-truth make-run-gpu truth-cpu-tests gpu-tests
  ARCHIVE=1
  OUT=$(mktemp -d)
fi
. "$(dirname "$0")/h200_common.sh"
export COLUMNS=80
PYTEST="python3 -W ignore -m pytest -o addopts=-ra -p no:cacheprovider -q"
step_pinned_truth() { step pinned-truth 100 python3 benchmarks/pinned_truth.py --out "$OUT"; }
step_make_run_gpu() {
  step make-run-gpu 60 python3 -W ignore -m offloadprobe compare naive lazy registered \
    --payload 1GiB --cycles 2 --max-host-peak 2.5x --expect naive=over-budget
}
step_truth_cpu_tests() {
  step truth-cpu-tests 60 $PYTEST tests/integration/test_last_word_cpu.py \
    tests/integration/test_rank_cgroups_cpu.py tests/integration/test_adversarial_cpu.py
}
step_gpu_tests() {
  step gpu-tests 60 $PYTEST ${GPU_TESTS:-tests/gpu/test_hugepin_cuda.py tests/gpu/test_strategies_cuda.py}
}
step_outside_allocators() {
  step outside-allocators 45 python3 benchmarks/outside_allocators.py \
    --out "$OUT/$D-outside-allocators.json"
}
step_alloc_conf() {
  step alloc-conf 30 python3 -W ignore -m offloadprobe alloc-conf --json "$OUT/$D-alloc-conf.json"
}
step_projection() {
  step projection-validation 150 python3 -W ignore benchmarks/projection_validation.py \
    --cycles 2 --out "$OUT/$D-projection-validation.json"
}
{ versions; echo "cgroup: $(head -1 /proc/self/cgroup)"; } | tee -a "$OUT/$D-steps.log"
run_steps "$@"
if [ "$ARCHIVE" = 1 ]; then
  tar czf "$FINAL/$D-truth-checks.tar.gz" -C "$OUT" .
  cp "$OUT/$D-steps.log" "$FINAL/$D-truth-checks-steps.log"
fi
