#!/usr/bin/env bash
# GPU tests on the H200 (kind nvidia-h200, or nvidia-h200-x2 with MACHINE=h200x2: the
# two-GPU tests run there), with the versions and the commit they ran on; one device call
# runs 10 min at most, so a long list goes in parts. The project's addopts (-n auto ...)
# are replaced: one process, the GPU's alone.
# Usage: COMMIT=SHA bash benchmarks/h200_gpu_tests.sh NAME [TEST_PATH...]
#        (default tests/gpu; log: $OUT/$D-NAME.log, see benchmarks/h200_common.sh)
. "$(dirname "$0")/h200_common.sh"
NAME=$1
shift
LOG="$OUT/$D-$NAME.log"
versions > "$LOG"
timeout "$(left)" python3 -W ignore -m pytest -o addopts="-ra" -p no:cacheprovider \
  -v --durations=10 "${@:-tests/gpu}" >> "$LOG" 2>&1
echo "gpu tests exit $?" >> "$LOG"
tail -n 12 "$LOG"
