#!/usr/bin/env bash
# GPU tests on one H200 (kind nvidia-h200), one part per device call (a call runs 10 min
# at most), with the versions and the commit they ran on. The device image has no
# megatron-core: its wheel (and cupti-python, pyelftools, torch-memory-saver) travel in
# .whl/. The project's addopts (-n auto ...) are replaced: one process, the GPU's alone.
# Usage: COMMIT=SHA bash benchmarks/h200_gpu_tests.sh NAME TEST_PATH...
#        (log: $OUT/h200-DATE-NAME.log; $OUT defaults to benchmarks/results)
set -u
OUT=${OUT:-benchmarks/results}
NAME=$1
shift
LOG="$OUT/h200-$(date +%F)-$NAME.log"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
if ! python3 -c "import megatron.core" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
    > /dev/null 2>&1
  export PYTHONPATH=/tmp/site:$PWD
fi
python3 -W ignore -c "import torch, megatron.core as m, platform, subprocess
print('torch', torch.__version__, '| cuda', torch.version.cuda, '| megatron_core', m.__version__,
      '| python', platform.python_version())
print('gpus', torch.cuda.device_count(), '|', torch.cuda.get_device_name(0), '| driver',
      subprocess.run(['nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader'],
                     capture_output=True, text=True).stdout.strip())" > "$LOG" 2>&1
echo "commit ${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" >> "$LOG"
timeout "${BUDGET_S:-540}" python3 -W ignore -m pytest -o addopts="-ra" -p no:cacheprovider \
  -v --durations=10 "$@" >> "$LOG" 2>&1
echo "gpu tests exit $?" >> "$LOG"
tail -n 12 "$LOG"
