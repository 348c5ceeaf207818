#!/usr/bin/env bash
# One H200 call (2026-12-01, second session), one run after another (device totals are
# the GPU's): the GPU variant of `make run` (1 GiB), the README's 5 GiB timeline plot,
# the sequence presets not yet passed (--resume: the verl-shaped rows again after the
# functions learnt verl's branches), and every built-in strategy with model parts.
# Run from the repository root, megatron-core, cupti-python, torch_memory_saver on PYTHONPATH.
set -u
OUT=${OUT:-benchmarks/results}
D=${MACHINE:-h200}-$(date +%F)
export PYTHONUNBUFFERED=1
[ -e "$OUT/$D-sequences.json" ] || cp "benchmarks/results/$D-sequences.json" "$OUT/" 2>/dev/null
timeout 100 python3 -W ignore -m offloadprobe compare naive lazy registered --payload 1GiB \
    --cycles 2 --max-host-peak 2.5x --expect naive=over-budget > "$OUT/$D-make-run-gpu-1gib.log" 2>&1
echo "make-run variant exit $?" | tee -a "$OUT/$D-make-run-gpu-1gib.log"; head -12 "$OUT/$D-make-run-gpu-1gib.log"
timeout 230 python3 -W ignore -m offloadprobe compare naive lazy registered --device cuda \
    --payload 5GiB --cycles 3 --no-reference-check --no-progress \
    --json "$OUT/$D-compare-timeline.json" --trace "$OUT/$D-compare-timeline.json.gz" \
    --plot "$OUT/$D-compare-timeline.png" > "$OUT/$D-compare-timeline.log" 2>&1
echo "compare exit $?"; head -14 "$OUT/$D-compare-timeline.log"; tail -4 "$OUT/$D-compare-timeline.log"
timeout 150 python3 -W ignore benchmarks/sequences.py --out "$OUT" --payload 256MiB --resume \
    > "$OUT/$D-sequences-resumed-2.log" 2>&1
echo "sequences exit $?"; grep -E "^\[|exit" "$OUT/$D-sequences-resumed-2.log" | tail -14
P=$(mktemp -d)
OUT=$P BUDGET=${PARTS_BUDGET:-100} bash benchmarks/h200_parts.sh 2>&1 | tee "$P/session.log" | tail -30
tar -C "$P" -czf "$OUT/$D-parts.tar.gz" .
