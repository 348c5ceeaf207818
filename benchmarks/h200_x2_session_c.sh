set -u
FINAL=$OUT; O=$(mktemp -d); D=h200x2-$(date +%F)
export PYTHONUNBUFFERED=1
( export CUDA_VISIBLE_DEVICES=0
  timeout 280 python3 -W ignore benchmarks/sampler_overhead.py --payload 5GiB --device cuda --repetitions 15 --out "$O/$D-sampler-overhead-15.json" > "$O/$D-sampler-15.log" 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1
  timeout 60 python3 -W ignore benchmarks/first_cycle_breakdown.py --size 5GiB --out "$O/$D-first-cycle-breakdown.json" > "$O/$D-first-cycle.log" 2>&1
  timeout 200 python3 -W ignore -m offloadprobe compare registered --optimizer-strategy mcore --optimizer-strategy complete --precision-aware --optimizer-first --device cuda --payload 1GiB --cycles 2 --json "$O/$D-mcore-optimizer-first.json" > "$O/$D-mcore-optimizer-first.log" 2>&1; echo "exit $?" >> "$O/$D-mcore-optimizer-first.log" ) &
wait; tail -n 8 "$O"/*.log; tar -C "$O" -czf "$FINAL/results-C.tar.gz" .
