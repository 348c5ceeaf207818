#!/usr/bin/env bash
# The example job under attach on one H200 (or two with NPROC=2), 5 GiB of parameters per
# rank, with each offload pair: pre-fix, post-fix and megatron-core's own; then the
# overhead benchmark. Results land in $OUT (default results/attach-h200).
# Run from the repository root, megatron-core on PYTHONPATH:
#   PYTHONPATH=$PWD:$MEGATRON bash examples/attach/h200.sh
set -euo pipefail
OUT=${OUT:-results/attach-h200}
NPROC=${NPROC:-1}
PAYLOAD=${PAYLOAD:-5120}
mkdir -p "$OUT"
launch=(python)
if [ "$NPROC" -gt 1 ]; then
  launch=(torchrun --standalone --nproc-per-node "$NPROC")
fi
for pair in pre post mcore; do
  phases=(--phase "offload=offload_pairs:offload_model_$pair" --phase "load=offload_pairs:load_model_$pair")
  if [ "$pair" = mcore ]; then phases+=(--preset megatron-core); fi
  python -m offloadprobe attach "${phases[@]}" \
    --json "$OUT/example-$pair.json" --markdown "$OUT/example-$pair.md" -- \
    "${launch[@]}" examples/attach/train_offload.py --offload "$pair" \
    --payload-mib "$PAYLOAD" --cycles 3 --device cuda 2>&1 | tee "$OUT/example-$pair.log"
done
python benchmarks/attach_overhead.py --json "$OUT/attach-overhead.json"
