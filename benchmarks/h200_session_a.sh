#!/usr/bin/env bash
# One H200 call (2026-12-01, second session): the README's 5 GiB timeline plot re-made on
# the code of today, then every sequence preset not yet measured (--resume) beside the GPU
# variant of `make run` (both light: 256 MiB and 8 MiB, each figure per process).
# Run from the repository root, megatron-core, cupti-python, torch_memory_saver on PYTHONPATH.
set -u
OUT=${OUT:-benchmarks/results}
D=${MACHINE:-h200}-$(date +%F)
export PYTHONUNBUFFERED=1
[ -e "$OUT/$D-sequences.json" ] || cp "benchmarks/results/$D-sequences.json" "$OUT/" 2>/dev/null
python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, sys.version.split()[0])"
timeout 200 python3 -W ignore -m offloadprobe compare naive lazy registered --device cuda \
    --payload 5GiB --cycles 3 --no-progress --json "$OUT/$D-compare-timeline.json" \
    --trace "$OUT/$D-compare-timeline.json.gz" --plot "$OUT/$D-compare-timeline.png" \
    > "$OUT/$D-compare-timeline.log" 2>&1
echo "compare exit $?"; head -30 "$OUT/$D-compare-timeline.log"
(timeout 300 python3 -W ignore benchmarks/sequences.py --out "$OUT" --payload 256MiB --resume \
    > "$OUT/$D-sequences-resumed.log" 2>&1; echo "sequences exit $?" >> "$OUT/$D-sequences-resumed.log") &
seqs=$!
timeout 120 python3 -W ignore -m offloadprobe compare naive lazy registered --payload 8MiB \
    --cycles 2 --max-host-peak 2.5x --expect naive=over-budget > "$OUT/$D-make-run-gpu.log" 2>&1
echo "make-run variant exit $?" | tee -a "$OUT/$D-make-run-gpu.log"; head -20 "$OUT/$D-make-run-gpu.log"
python3 -c "import torch_memory_saver; print('tms', torch_memory_saver.__file__)" 2>&1 | tail -1
wait $seqs
tail -25 "$OUT/$D-sequences-resumed.log"
