#!/usr/bin/env bash
# Issue 11 on a GPU host: the bound model's GPU tests, the acceptance report (a decode step of
# the demo and the synthetic qwen2-0.5b, with and without --cuda-graph) and the capture cost.
#   OUT=/some/dir bash scripts/gpu_check_i11.sh [tests] [report] [overhead]   (default: all three)
# A device call is limited to 600 s: give the parts one or two at a time if the run is slow.
# Logs go under $OUT; a summary table is printed at the end. Exit 1 if any part failed.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"  # $OUT, the wheels, PYTHONPATH, the cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/nvidia-smi.txt"
declare -A RC
PARTS=("$@"); [ ${#PARTS[@]} -eq 0 ] && PARTS=(tests report overhead)
want() { [[ " ${PARTS[*]} " == *" $1 "* ]]; }
run() {  # run NAME LIMIT_S CMD...: output in $OUT/NAME.log
  local name=$1 limit=$2; shift 2
  echo "=== $name $(date -u +%FT%TZ)"
  timeout -k 5 "$limit" "$@" > "$OUT/$name.log" 2>&1
  RC[$name]=$?
  tail -25 "$OUT/$name.log"
}
# the ceilings first (per path and mode; re-measured: the cache lacks the new keys)
want tests && run tests 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rxX \
  tests/runner/test_bound_gpu.py "tests/kernels/test_attention_matmul_stats_gpu.py::test_ceilings_are_sane"
want report && run report 300 python3 scripts/bound_report.py --backend cupy --steps 4 --out "$OUT" demo qwen2-0.5b
want overhead && run overhead 240 python3 scripts/capture_overhead.py --backend cupy --steps 24 demo qwen2-0.5b
python3 - "$TRACEKIT_CACHE" <<'PY' | tee "$OUT/ceilings.txt"
import json, pathlib, sys
for p in sorted(pathlib.Path(sys.argv[1]).glob("ceilings-cupy-*.json")):
    c = json.loads(p.read_text())
    print(p.name, "copy", c["copy_bandwidth_Bps"], "floors", c.get("launch_floor_s"),
          "peaks", c.get("peak_flops_by_path"), "idle launch", c["launch_overhead_s"])
PY
echo "=== summary"
printf '%-10s %s\n' part "rc (0 = ok)"
for k in "${PARTS[@]}"; do printf '%-10s %s\n' "$k" "${RC[$k]:-not run}"; done
want report && grep -E "^(---|classes|breakdown|output|node time|FAIL)" "$OUT/report.log"
want tests && grep -E "passed|failed|xfail|XPASS" "$OUT/tests.log" | tail -3
want overhead && grep -E "x\b|timing|untraced" "$OUT/overhead.log" | tail -8
fail=0; for k in "${PARTS[@]}"; do [ "${RC[$k]:-1}" = 0 ] || fail=1; done
exit $fail
