#!/usr/bin/env bash
# Proves tracekit's NVTX ranges are real (run on a GPU host with Nsight Compute, e.g. the H200):
# for each node name given (default: blk.0.ffn_up blk.0.attn_residual_norm, the fused add + norm), profile a record-trace
# run with `ncu --nvtx --nvtx-include "tracekit@<node>/"` and check that exactly that node's
# kernels were profiled:
#   1. every profiled kernel ran inside the push/pop range <node> of domain tracekit (innermost);
#   2. per step, the profiled kernels are the node's own launch records of that very run
#      (same kernel names, same count); a record made by a library (cuBLAS: no grid) may launch
#      any kernels, at least one;
#   3. steps: one profiled group per step of the trace (prefill + decode), nothing else.
# Usage: scripts/ncu_nvtx_check.sh [NODE ...]       (STEPS=2 MODEL=path.gguf OUT=dir to change)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
STEPS=${STEPS:-2}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
NCU=${NCU:-ncu}
MODEL_ARGS=()
[ -n "${MODEL:-}" ] && MODEL_ARGS=("$MODEL")
NODES=("$@")
[ ${#NODES[@]} -eq 0 ] && NODES=(blk.0.ffn_up blk.0.attn_residual_norm)
command -v "$NCU" >/dev/null || { echo "error: $NCU (Nsight Compute CLI) not found" >&2; exit 2; }

status=0
for NODE in "${NODES[@]}"; do
  tag=${NODE//[^A-Za-z0-9_.-]/_}
  echo "== $NODE"
  # --capture timing: one pass per step, so each node runs once per step; --clock-control none
  # keeps the GPU at its own clocks (ncu locks them to base by default). Its own cache folder:
  # ceilings measured under the profiler must not be cached for later, unprofiled runs.
  TRACEKIT_CACHE="$OUT/cache" "$NCU" --nvtx --nvtx-include "tracekit@${NODE}/" --clock-control none \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
    --csv --page raw --print-units base --log-file "$OUT/$tag.csv" \
    "$PY" -m tracekit record-trace "${MODEL_ARGS[@]}" --backend cupy --capture timing \
    --steps "$STEPS" --no-progress -o "$OUT/$tag.json" >/dev/null
  "$PY" - "$OUT/$tag.json" "$OUT/$tag.csv" "$NODE" <<'PY' || status=1
import sys
from collections import Counter

from tracekit.trace.ncu import DOMAIN, STEP_RE, read_ncu_csv
from tracekit.trace.format import load_trace

trace_path, csv_path, node = sys.argv[1:]
trace = load_trace(trace_path)
kernels = read_ncu_csv(csv_path)
nid = next(n["id"] for n in trace["nodes"] if n["name"] == node)
problems = []
by_step: dict[str, list[str]] = {}
names = {n["name"] for n in trace["nodes"]}
for k in kernels:
    # order-agnostic: the one node range on the stack must be ours, next to one step range
    ours = [r for d, r in k["stack"] if d == DOMAIN]
    in_nodes = [r for r in ours if r in names]
    steps = [r for r in ours if STEP_RE.match(r)]
    if in_nodes != [node] or len(steps) != 1:
        problems.append(f"kernel {k['kernel']} ran in range {'/'.join(ours) or '(none)'}")
        continue
    by_step.setdefault(steps[0], []).append(k["kernel"])
total = 0
for step in trace["steps"]:
    launches = step["nodes"][nid]["launches"]
    own = Counter(la["kernel"] for la in launches if la["grid"] is not None)
    libs = sum(1 for la in launches if la["grid"] is None)
    got = Counter(by_step.pop(step["name"], []))
    total += sum(got.values())
    missing = own - got
    surplus = {k: got[k] - own[k] for k in own if got[k] > own[k]}
    others = {k: v for k, v in got.items() if k not in own}
    if missing:
        problems.append(f"{step['name']}: launch records not profiled: {dict(missing)}")
    if surplus:
        problems.append(f"{step['name']}: more launches than records: {surplus}")
    if others and not libs:
        problems.append(f"{step['name']}: kernels outside the launch records: {others}")
    if libs and sum(others.values()) < libs:
        problems.append(f"{step['name']}: {libs} library launch(es), {sum(others.values())} kernels")
    print(f"  {step['name']:10s} profiled {sum(got.values())}: {dict(got)}")
for s in by_step:
    problems.append(f"kernels in step range {s!r}, which the trace does not have")
launched = sum(len(s["nodes"][i]["launches"]) for s in trace["steps"] for i in range(len(trace["nodes"])))
print(f"  {total} kernels profiled, out of {launched}+ launch records in the run")
if total == 0:
    problems.append("no kernel profiled: the NVTX filter matched nothing")
for p in problems:
    print(f"  FAIL {p}")
print("  OK: exactly this node's kernels were profiled" if not problems else "  FAILED")
sys.exit(1 if problems else 0)
PY
done
echo "reports in $OUT"
exit $status
