#!/usr/bin/env bash
# One H200 call: the attach example at 5 GiB with each function pair, every sequence
# preset, the hugepin/relock GPU tests (these three side by side: each figure they report
# is per process), then the first-offload benchmark alone with the time that is left.
# Run from the repository root, megatron-core and cupti-python on PYTHONPATH. Into $OUT.
set -u
OUT=${OUT:-benchmarks/results}
D=${MACHINE:-h200}-$(date +%F)
export PYTHONUNBUFFERED=1
start=$(date +%s)
A=$(mktemp -d)
(OUT=$A PYTHONPATH=$PWD/examples/attach:$PYTHONPATH timeout 200 bash examples/attach/h200.sh \
    > "$A/attach-session.log" 2>&1; echo "attach exit $?" >> "$A/attach-session.log") &
attach=$!
(timeout 200 python3 -W ignore benchmarks/sequences.py --out "$OUT" --payload 256MiB \
    > "$OUT/$D-sequences.log" 2>&1; echo "sequences exit $?" >> "$OUT/$D-sequences.log") &
seqs=$!
timeout 200 python3 -m pytest tests/gpu/test_hugepin_cuda.py -q -p no:cacheprovider -n 0 -rs \
    > "$OUT/$D-gpu-tests-hugepin.log" 2>&1
echo "hugepin tests exit $?"; tail -3 "$OUT/$D-gpu-tests-hugepin.log"
wait $attach $seqs
tar -C "$A" -czf "$OUT/$D-attach-example.tar.gz" .
grep -E "exit|error" "$A/attach-session.log" | tail -5; tail -3 "$OUT/$D-sequences.log"
left=$(( 560 - ($(date +%s) - start) ))
echo "first-offload budget ${left}s"
timeout $((left + 30)) python3 -W ignore benchmarks/first_offload.py --out "$OUT" \
    --budget-s "$left" > "$OUT/$D-first-offload.log" 2>&1
echo "first-offload exit $?"; tail -25 "$OUT/$D-first-offload.log"
