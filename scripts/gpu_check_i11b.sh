#!/usr/bin/env bash
# Issue 11 part 1 on a GPU host: per-launch device times in every mode (tracekit/runner/stamps.py).
#   OUT=/some/dir bash scripts/gpu_check_i11b.sh [tests] [report] [overhead]   (default: all three)
# tests: the stamp GPU tests, the bound tests (graph vs stream node times within 15%, no longer
# xfail), the replay tests (launch records of graph and plan passes); report: the acceptance
# report for the synthetic qwen2-0.5b, both modes; overhead: the capture cost (timing pass with
# graphs vs untraced, and without graphs). Logs under $OUT, a summary table at the end, exit 1
# if any part failed. Each part has its own timeout (110 + 90 + 90 s: under 300 s in all); a
# part that times out can be re-run alone by name.
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
want tests && run tests 110 python3 -m pytest -q -m gpu -p no:cacheprovider -rxX \
  tests/runner/test_stamps_gpu.py tests/runner/test_bound_gpu.py tests/runner/test_replay_gpu.py \
  tests/kernels/test_launch_tape.py
want report && run report 90 python3 scripts/bound_report.py --backend cupy --steps 4 --out "$OUT" qwen2-0.5b
want overhead && run overhead 90 python3 scripts/capture_overhead.py --backend cupy --steps 24 demo qwen2-0.5b
echo "=== summary"
printf '%-10s %s\n' part "rc (0 = ok)"
for k in "${PARTS[@]}"; do printf '%-10s %s\n' "$k" "${RC[$k]:-not run}"; done
want tests && grep -E "passed|failed|xfail|XPASS" "$OUT/tests.log" | tail -3
want report && grep -E "^(---|classes|breakdown|output|node time|FAIL)" "$OUT/report.log"
want overhead && grep -E "x\b|timing|untraced" "$OUT/overhead.log" | tail -8
fail=0; for k in "${PARTS[@]}"; do [ "${RC[$k]:-1}" = 0 ] || fail=1; done
exit $fail
