#!/usr/bin/env bash
# Offload strategies measured on the H200 by the benchmarks that drive them, one step
# after another. Usage: bash benchmarks/h200_strategies.sh STEP...
# (see benchmarks/h200_common.sh)
#   parts           every built-in strategy that moves parameters, with a reference model
#                   and half the policy frozen (model parts): bit-exact round trips and what
#                   each part left on the device, one run each ($D-parts.tar.gz; PAYLOAD,
#                   STRATEGIES, PARTS_BUDGET; DEVICE=cpu PAYLOAD=1MiB checks it without a GPU)
#   field-params-optimizer, field-pipelined, field-alloc
#                   benchmarks/field_strategies.py --parts ... ($D-field-strategies-*.json)
#   optimizer-offload  benchmarks/optimizer_offload.py ($D-optimizer-offload.json)
#   first-offload   benchmarks/first_offload.py with the time left ($D-first-offload.json);
#                   FROM=an earlier first-offload JSON: every row measured anew into it, its
#                   component timings kept (as for h200-2026-12-01-first-offload.json)
#   sequences       every sequence preset at 256 MiB ($D-sequences.json; RESUME=1: only the
#                   presets not yet in the committed file of the day)
#   attach-example  examples/attach/h200.sh: the attach example at 5 GiB with each function
#                   pair ($D-attach-example.tar.gz)
# Run from the repository root (megatron-core, cupti-python, torch_memory_saver importable
# or in .whl/).
. "$(dirname "$0")/h200_common.sh"
step_parts() {
  local p s rc log left t0 strategies
  p=$(mktemp -d)
  t0=$(date +%s)
  strategies=${STRATEGIES:-hugepin relock pipelined mcore tms lazy registered naive pageable}
  for s in $strategies; do  # the strategies changed for the parts run first
    left=$(( ${PARTS_BUDGET:-115} - ($(date +%s) - t0) ))
    if [ "$left" -lt 15 ]; then echo "$s: not run, ${left}s of the budget left"; continue; fi
    log="$p/$D-parts-$s.log"
    timeout "$left" python3 -W ignore -m offloadprobe run --device "${DEVICE:-cuda}" \
      --strategy "$s" --optimizer-strategy complete --ref-model --frozen-fraction 0.5 \
      --payload "${PAYLOAD:-256MiB}" --cycles 2 --reference-check --no-progress \
      --json "$p/$D-parts-$s.json" > "$log" 2>&1
    rc=$?
    echo "$s exit $rc ($(($(date +%s) - t0)) s): $(head -1 "$log")"
    grep -E "^(frozen params|ref model|parameters) |left on the device" "$log" | head -4
    grep -E "parameters outside the DDP|4 KiB pages" "$log" | head -2
    [ "$rc" -eq 0 ] || tail -2 "$log"
  done | tee "$p/session.log"
  tar -C "$p" -czf "$OUT/$D-parts.tar.gz" .
}
step_field_params_optimizer() {
  step field-params-optimizer 300 python3 -W ignore benchmarks/field_strategies.py \
    --parts params,optimizer --out "$OUT"
}
step_field_pipelined() {
  step field-pipelined 200 python3 -W ignore benchmarks/field_strategies.py --parts pipelined \
    --out "$OUT"
}
step_field_alloc() {
  step field-alloc 300 python3 -W ignore benchmarks/field_strategies.py --parts alloc --out "$OUT"
}
step_optimizer_offload() {
  step optimizer-offload 120 python3 -W ignore benchmarks/optimizer_offload.py --out "$OUT"
}
step_first_offload() {
  if [ -n "${FROM:-}" ]; then  # every row again into the day's file; the components stand
    python3 -c "import json, sys; d = json.load(open(sys.argv[1])); d['rows'] = []
json.dump(d, open(sys.argv[2], 'w'), indent=1)" "$FROM" "$OUT/$D-first-offload.json"
  fi
  TAIL=25 step first-offload 120 python3 -W ignore benchmarks/first_offload.py --out "$OUT" \
    --budget-s $(( $(left) - 40 ))
}
step_sequences() {
  local resume=()
  if [ "${RESUME:-0}" = 1 ]; then
    [ -e "$OUT/$D-sequences.json" ] || cp "benchmarks/results/$D-sequences.json" "$OUT/" 2>/dev/null
    resume=(--resume)
  fi
  TAIL=25 step sequences 120 python3 -W ignore benchmarks/sequences.py --out "$OUT" \
    --payload 256MiB "${resume[@]}"
}
step_attach_example() {
  local a
  a=$(mktemp -d)
  OUT=$a PYTHONPATH=$PWD/examples/attach:${PYTHONPATH:-} \
    step attach-example 150 bash examples/attach/h200.sh
  tar -C "$a" -czf "$OUT/$D-attach-example.tar.gz" .
}
versions | tee -a "$OUT/$D-steps.log"
run_steps "$@"
