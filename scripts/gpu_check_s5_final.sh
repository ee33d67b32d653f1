#!/usr/bin/env bash
# Session 5's closing GPU check: llama-bench built in the background (for the side-by-side
# that follows in the next call), the GPU suite, issue 11's bound report and capture cost,
# decode speed, and the H200 demo traces re-recorded with the current kernels (under $OUT).
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
[ -x /root/llama/llama.cpp/build/bin/llama-bench ] || \
  (bash scripts/build_llama_bench.sh .llama/llama-src.tar.xz /root/llama > "$OUT/build.log" 2>&1 &)
echo "=== suite $(date -u +%FT%TZ)"
timeout 220 python3 -m pytest -q -m gpu -n 8 --timeout 150 --ignore=tests/viz -p no:cacheprovider \
  tests > "$OUT/suite.log" 2>&1; tail -6 "$OUT/suite.log" | grep -v "^$"
echo "=== report $(date -u +%FT%TZ)"
timeout 120 python3 scripts/bound_report.py --backend cupy --steps 4 --out "$OUT" qwen2-0.5b \
  > "$OUT/report.log" 2>&1; echo "rc=$?"
grep -E "^(---|classes|breakdown|output|node time|FAIL)" "$OUT/report.log" | head -20
echo "=== overhead $(date -u +%FT%TZ)"
timeout 100 python3 scripts/capture_overhead.py --backend cupy --steps 24 demo qwen2-0.5b \
  > "$OUT/overhead.log" 2>&1; tail -8 "$OUT/overhead.log"
echo "=== traces $(date -u +%FT%TZ)"
for g in "" "--cuda-graph"; do
  n=demo-h200${g:+-graph}
  timeout 60 python3 -m tracekit record-trace --backend cupy --prompt "The kernel reads" --steps 6 \
    --capture full $g --no-progress -o "$OUT/$n.json" 2>&1 | tail -1
done
ls -la "$OUT"/*.json | head
echo "=== done $(date -u +%FT%TZ)"; tail -3 "$OUT/build.log" 2>/dev/null
