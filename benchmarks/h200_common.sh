# Sourced by the benchmarks/h200_*.sh scripts: what every H200 device call sets up.
# The device image has no megatron-core: its wheel (and cupti-python, pyelftools,
# torch-memory-saver) travel in .whl/ and are installed into /tmp/site where missing.
# Results are named $D-NAME (D: MACHINE-DATE, MACHINE h200 by default, h200x2 on the
# two-GPU kind); they go into $OUT (default benchmarks/results). Each step keeps to what
# is left of BUDGET_S seconds from the start, and is skipped, saying so, where fewer than
# it needs are left. Steps run one after another: device totals are the GPU's, not a
# process's. Two queues side by side on a 2 x H200 lease (one GPU each) are two calls of
# a script with CUDA_VISIBLE_DEVICES=0 and =1 in the background.
set -u
OUT=${OUT:-benchmarks/results}
MACHINE=${MACHINE:-h200}
D=$MACHINE-$(date +%F)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
if ! python3 -c "import megatron.core" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
    > /dev/null 2>&1
  export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
START=$(date +%s)
left() { echo $(( ${BUDGET_S:-540} - ($(date +%s) - START) )); }
versions() {  # the versions, the GPU, the driver and the commit, one line each
  python3 -W ignore -c "import torch, megatron.core as m, platform, subprocess
print('torch', torch.__version__, '| cuda', torch.version.cuda, '| megatron_core', m.__version__,
      '| python', platform.python_version())
if not torch.cuda.is_available():
    print('gpus 0 | no CUDA: a check of the script itself')
else:
    print('gpus', torch.cuda.device_count(), '|', torch.cuda.get_device_name(0), '| driver',
          subprocess.run(['nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader'],
                         capture_output=True, text=True).stdout.strip())" 2>&1
  echo "commit ${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
}
step() {  # step NAME SECONDS CMD...: CMD under the time left, its output in $OUT/$D-NAME.log
  local name=$1 need=$2
  shift 2
  if [ "$(left)" -lt "$need" ]; then
    echo "skipped $name: $(left) s left, it needs $need" | tee -a "$OUT/$D-steps.log"
    return
  fi
  local t0 log="$OUT/$D-$name.log"
  t0=$(date +%s)
  timeout "$(left)" "$@" > "$log" 2>&1
  local rc=$?
  echo "$name exit $rc" >> "$log"
  echo "$name exit $rc in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/$D-steps.log"
  tail -n "${TAIL:-6}" "$log"
}
run_steps() {  # run_steps STEP...: each a function step_<name> of the sourcing script
  local s
  for s in "$@"; do
    if ! declare -F "step_${s//-/_}" > /dev/null; then
      echo "no step $s: choose from $(declare -F | sed -n 's/^declare -f step_//p' | tr _ - | tr '\n' ' ')" >&2
      exit 2
    fi
    "step_${s//-/_}"
  done
}
