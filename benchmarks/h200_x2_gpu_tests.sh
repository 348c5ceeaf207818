#!/usr/bin/env bash
# Every GPU test (tests/gpu, the two-GPU ones included) on one lease of 2 x H200 (kind
# nvidia-h200-x2), one after another on the device, with the versions and the commit they
# ran on. Usage: bash benchmarks/h200_x2_gpu_tests.sh NAME  (log: $OUT/h200x2-DATE-NAME.log)
# The device image has no pytest-xdist: the project's addopts (-n auto ...) are replaced.
set -u
OUT=${OUT:-benchmarks/results}
LOG="$OUT/h200x2-$(date +%F)-${1:-gpu-tests}.log"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
if ! python3 -c "import megatron.core" 2>/dev/null; then
  pip install --quiet --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
  export PYTHONPATH=/tmp/site:$PWD
fi
python3 -W ignore -c "import torch, megatron.core as m, platform
print('torch', torch.__version__, '| cuda', torch.version.cuda, '| megatron_core', m.__version__,
      '| python', platform.python_version())
print('gpus', torch.cuda.device_count(), '|', torch.cuda.get_device_name(0))" > "$LOG" 2>&1
echo "commit ${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" >> "$LOG"
timeout 540 python3 -W ignore -m pytest -o addopts="-ra" -p no:cacheprovider -v tests/gpu \
  >> "$LOG" 2>&1
echo "gpu tests exit $?" >> "$LOG"
tail -n 8 "$LOG"
