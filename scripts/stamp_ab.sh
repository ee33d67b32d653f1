#!/usr/bin/env bash
# One device call: the 0.5B decode step's device times (full_pass_cost.py) with main's stamp and
# STAMP_AB_DEFINES' (default -DSTAMP_COMPACT=0: the exit count of before), then (unless
# STAMP_AB_TESTS=0) the stamp GPU tests compiled with those;
# STAMP_AB_MORE=1 adds the capture ratios (capture_overhead.py, 3 rounds) of both and
# stamp_cost.py's grid table and --mechanism rows (unless STAMP_AB_GRID=0).
source scripts/gpu_env.sh
alt=${STAMP_AB_DEFINES:--DSTAMP_COMPACT=0}
for d in "" "$alt"; do
  echo "== fullcost '$d' $(date +%T)"; TRACEKIT_CUDA_DEFINES="$d" timeout 110 python3 scripts/full_pass_cost.py qwen2-0.5b > "$OUT/fullcost$d.log" 2>&1; grep -E "^  (plain|timed|full) |Error" "$OUT/fullcost$d.log"
done
[ "${STAMP_AB_TESTS:-1}" = 1 ] || exit 0
echo "== stamp tests '$alt' $(date +%T)"
TRACEKIT_CUDA_DEFINES="$alt" timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -n 4 --timeout 100 --timeout-method thread \
  tests/runner/test_stamps_gpu.py tests/runner/test_pdl_gpu.py tests/runner/test_bound_gpu.py > "$OUT/tests.log" 2>&1; tail -3 "$OUT/tests.log"
[ -n "${STAMP_AB_MORE:-}" ] || exit 0
for d in "" "$alt"; do
  echo "== capture '$d' $(date +%T)"; TRACEKIT_CUDA_DEFINES="$d" timeout 100 python3 scripts/capture_overhead.py --backend cupy --steps 48 --rounds 3 qwen2-0.5b > "$OUT/capture$d.log" 2>&1; grep -E "over 3 rounds|Error" "$OUT/capture$d.log"
done
[ "${STAMP_AB_GRID:-1}" = 1 ] || exit 0
python3 scripts/stamp_cost.py --only "main,compact,start only" > $OUT/grid.log 2>&1; tail -5 $OUT/grid.log
python3 scripts/stamp_cost.py --mechanism --reps 30 > $OUT/mech.log 2>&1; grep "LaunchStamp.*round 1" $OUT/mech.log
echo "== end $(date +%T)"
