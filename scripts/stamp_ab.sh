#!/usr/bin/env bash
# One device call: the stamp variants under stamp_cost.py (grid table, --mechanism), then the
# 0.5B decode step's device times (full_pass_cost.py) and capture ratios with each STAMP_COMPACT.
source scripts/gpu_env.sh
python3 scripts/stamp_cost.py --only "main,compact,start only" > $OUT/grid.log 2>&1; tail -5 $OUT/grid.log
python3 scripts/stamp_cost.py --mechanism --reps 30 > $OUT/mech.log 2>&1; grep "LaunchStamp.*round 1" $OUT/mech.log
for d in "" "-DSTAMP_COMPACT=1" "-DSTAMP_COMPACT=2"; do
  echo "== fullcost '$d'"; TRACEKIT_CUDA_DEFINES="$d" timeout 150 python3 scripts/full_pass_cost.py qwen2-0.5b > "$OUT/fullcost$d.log" 2>&1; grep -E "plain|timed|full " "$OUT/fullcost$d.log" | head -4
done
for d in "" "-DSTAMP_COMPACT=1"; do
  echo "== capture '$d'"; TRACEKIT_CUDA_DEFINES="$d" timeout 120 python3 scripts/capture_overhead.py --backend cupy --steps 48 --rounds 3 qwen2-0.5b > "$OUT/capture$d.log" 2>&1; grep "over 3 rounds" "$OUT/capture$d.log"
done
