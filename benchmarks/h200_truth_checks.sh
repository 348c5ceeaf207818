#!/usr/bin/env bash
# One H200 call (kind nvidia-h200) for the truth issue (35) after its parts landed: the
# pinned-memory routes (benchmarks/pinned_truth.py), the GPU `make run` recipe, the CPU
# emulation's last-word, rank-cgroup and adversarial tests on this host's own cgroup v2,
# and the GPU tests the parts touch. One after another: every figure is per process.
# Needs .whl/ carried (megatron-core, cupti-python, pyelftools). Everything goes into one
# archive, $OUT/h200-DATE-truth-checks.tar.gz, beside steps.log; each step keeps to what
# is left of BUDGET_S (default 480 s).
set -u
FINAL=${OUT:-benchmarks/results}
OUT=$(mktemp -d)
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 COLUMNS=80
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
  > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD
START=$(date +%s)
left() { echo $(( ${BUDGET_S:-480} - ($(date +%s) - START) )); }
step() {  # step NAME SECONDS CMD...: runs CMD if SECONDS are left, its log in $OUT/NAME.log
  local name=$1 need=$2; shift 2
  if [ "$(left)" -lt "$need" ]; then echo "skipped $name: $(left) s left" | tee -a "$OUT/steps.log"; return; fi
  local t0=$(date +%s)
  timeout "$(left)" "$@" > "$OUT/step-$name.log" 2>&1
  echo "$name exit $? in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/steps.log"
  tail -n 6 "$OUT/step-$name.log"
}
python3 -W ignore -c "import torch, megatron.core as m, platform, subprocess
print('torch', torch.__version__, '| cuda', torch.version.cuda, '| megatron_core', m.__version__,
      '| python', platform.python_version(), '|', torch.cuda.get_device_name(0), '| driver',
      subprocess.run(['nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader'],
                     capture_output=True, text=True).stdout.strip())" | tee "$OUT/steps.log"
echo "commit ${COMMIT:-unknown}; cgroup: $(head -1 /proc/self/cgroup)" | tee -a "$OUT/steps.log"
PYTEST="python3 -W ignore -m pytest -o addopts=-ra -p no:cacheprovider -q"
step pinned-truth 100 python3 benchmarks/pinned_truth.py --out "$OUT"
step make-run-gpu 60 python3 -W ignore -m offloadprobe compare naive lazy registered \
  --payload 1GiB --cycles 2 --max-host-peak 2.5x --expect naive=over-budget
step truth-cpu-tests 60 $PYTEST tests/integration/test_last_word_cpu.py \
  tests/integration/test_rank_cgroups_cpu.py tests/integration/test_adversarial_cpu.py
step gpu-tests 60 $PYTEST ${GPU_TESTS:-tests/gpu/test_hugepin_cuda.py tests/gpu/test_strategies_cuda.py}
tar czf "$FINAL/h200-$(date +%F)-truth-checks.tar.gz" -C "$OUT" .
cp "$OUT/steps.log" "$FINAL/h200-$(date +%F)-truth-checks-steps.log"
