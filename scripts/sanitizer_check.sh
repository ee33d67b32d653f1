#!/usr/bin/env bash
# compute-sanitizer over every kernel at edge sizes and a demo forward (run on the H200).
# Each tool's summary line ("ERROR SUMMARY: N errors") is what RELIABILITY.md records.
set -uo pipefail
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
[ -n "$CS" ] || { echo "compute-sanitizer not found"; exit 1; }
for tool in memcheck racecheck initcheck; do
  echo "--- $tool"
  "$CS" --tool "$tool" --error-exitcode 3 --print-limit 20 python3 scripts/sanitize_kernels.py 2>&1 \
    | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|BAD|FAILED|all ok|demo forward|Error|error" | head -40
  echo "exit ${PIPESTATUS[0]}"
done
