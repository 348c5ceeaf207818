#!/usr/bin/env bash
# What measuring costs on the H200, one step after another.
# Usage: bash benchmarks/h200_costs.sh STEP...   (see benchmarks/h200_common.sh)
#   sampler          benchmarks/sampler_overhead.py at 5 GiB, REPS pairs (3; 15 for
#                    $D-sampler-overhead-15.json), into $D-sampler-overhead${NAME:-}.json
#   sampler-idle     the same with its default pairs ($D-sampler-overhead-idle-priority.json)
#   fingerprint      benchmarks/fingerprint_cost.py at 5 GiB on the GPU ($D-fingerprint-cost.json)
#   fingerprint-torch-ops  the same, 5 repeats with --torch-ops (as h200-2026-12-01's)
#   first-cycle      benchmarks/first_cycle_breakdown.py at 5 GiB ($D-first-cycle-breakdown.json)
# Run from the repository root (megatron-core, cupti-python importable or in .whl/).
. "$(dirname "$0")/h200_common.sh"
step_sampler() {
  local reps=${REPS:-3} name=${NAME:-}
  [ "$reps" = 3 ] || name=${NAME:--$reps}
  step "sampler$name" 200 python3 -W ignore benchmarks/sampler_overhead.py --payload 5GiB \
    --device cuda --repetitions "$reps" --out "$OUT/$D-sampler-overhead$name.json"
}
step_sampler_idle() {
  step sampler-idle 200 python3 -W ignore benchmarks/sampler_overhead.py --device cuda \
    --payload 5GiB --out "$OUT/$D-sampler-overhead-idle-priority.json"
}
step_fingerprint() {
  step fingerprint 45 python3 -W ignore benchmarks/fingerprint_cost.py --size 5GiB \
    --device cuda --out "$OUT/$D-fingerprint-cost.json"
}
step_fingerprint_torch_ops() {
  step fingerprint 60 python3 -W ignore benchmarks/fingerprint_cost.py --size 5GiB \
    --repeats 5 --torch-ops --out "$OUT/$D-fingerprint-cost.json"
}
step_first_cycle() {
  step first-cycle 45 python3 -W ignore benchmarks/first_cycle_breakdown.py --size 5GiB \
    --out "$OUT/$D-first-cycle-breakdown.json"
}
versions | tee -a "$OUT/$D-steps.log"
run_steps "$@"
