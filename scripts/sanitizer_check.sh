#!/usr/bin/env bash
# compute-sanitizer over every kernel at edge sizes and a demo forward (run on the H200).
# Each tool's summary line ("ERROR SUMMARY: N errors") is what RELIABILITY.md records; for
# initcheck the flagged reads are also counted per kernel and per host frame.
set -uo pipefail
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
[ -n "$CS" ] || { echo "compute-sanitizer not found"; exit 1; }
PY=${PYTHON:-python3}
for tool in ${TOOLS:-memcheck racecheck initcheck}; do
  echo "--- $tool"
  log=/tmp/sanitizer-$tool.log
  "$CS" --tool "$tool" --error-exitcode 3 --print-limit 100000 "$PY" scripts/sanitize_kernels.py >"$log" 2>&1
  echo "exit $?"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|BAD|FAILED|all ok|demo forward" "$log" | head -20
  if grep -q "Uninitialized" "$log"; then
    echo "flagged reads by kernel:"; grep -oE "^=========     at [A-Za-z_0-9]+" "$log" | sort | uniq -c
    echo "first host frame of each flagged launch:"
    grep -A1 "Saved host backtrace" "$log" | grep -oE "Host Frame: [^ ]+ in [^ ]+" | sort | uniq -c | head
  fi
done
