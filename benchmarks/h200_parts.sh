#!/usr/bin/env bash
# One H200 call, at most ~120 s: every built-in strategy that moves parameters, run with a
# reference model (not DDP-wrapped) and half the policy frozen outside the DDP buffers
# (issue 24, model parts): bit-exact round trips of every part, checked against a
# no-offload run, and what each part left on the device. One `offloadprobe run` after
# another, never side by side (device totals are the GPU's, not a process's). The
# strategies changed for the parts run first; a run that would start with under 15 s of
# the budget left is skipped and said so.
# Run from the repository root with megatron-core on PYTHONPATH. Logs and JSON into $OUT.
# DEVICE=cpu PAYLOAD=1MiB checks the script itself on a host without a GPU.
set -u
OUT=${OUT:-benchmarks/results}
DEVICE=${DEVICE:-cuda}
PAYLOAD=${PAYLOAD:-256MiB}
BUDGET=${BUDGET:-115}
STRATEGIES=${STRATEGIES:-hugepin relock pipelined mcore tms lazy registered naive pageable}
D=${MACHINE:-h200}-$(date +%F)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
start=$(date +%s)
for s in $STRATEGIES; do
    left=$((BUDGET - ($(date +%s) - start)))
    if [ "$left" -lt 15 ]; then
        echo "$s: not run, ${left}s of the budget left"
        continue
    fi
    log="$OUT/$D-parts-$s.log"
    timeout "$left" python3 -W ignore -m offloadprobe run --device "$DEVICE" --strategy "$s" \
        --optimizer-strategy complete --ref-model --frozen-fraction 0.5 --payload "$PAYLOAD" \
        --cycles 2 --reference-check --no-progress --json "$OUT/$D-parts-$s.json" \
        > "$log" 2>&1
    rc=$?
    echo "$s exit $rc ($(($(date +%s) - start)) s): $(head -1 "$log")"
    grep -E "^(frozen params|ref model|parameters) |left on the device" "$log" | head -4
    grep -E "parameters outside the DDP|4 KiB pages" "$log" | head -2
    [ "$rc" -eq 0 ] || tail -2 "$log"
done
