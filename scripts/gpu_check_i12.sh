#!/usr/bin/env bash
# Issue 12 on a GPU host: the quant declarations' generated kernels (every type, the four new
# ones included), the geometry defines, and their speed against copy bandwidth, in one call.
#   OUT=/tmp/out scripts/gpu_check_i12.sh [tests] [bench]   (repo root as cwd; both by default;
#   each stage stays under ~5 minutes, so the two fit one 600 s call or go in two calls)
# 1. GPU parity: dequant + embed of every declared type, bit-exact vs the NumPy reference (itself
#    bit-exact vs gguf.quants.dequantize) at edge sizes, poisoned outputs, every table alignment;
#    the elementwise/stats/attention kernels (now compiled with -D geometry defines); the launch
#    tape and CUDA-graph replay (the generated stamp list); the synthetic models on the GPU.
# 2. tracekit bench: dequant and embed rows of every type, elementwise rows (regression check
#    against BENCHMARKS.md: dequant 91.6-93.5% of copy, add/mul 1.05x torch).
# Prints a summary table at the end; logs and JSON under $OUT.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"  # $OUT, the wheels, PYTHONPATH, the cache
PY=${PYTHON:-python3}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/nvidia-smi.txt"

TESTS=(
  tests/kernels/test_dequant_embed_gpu.py tests/kernels/test_embed_align_gpu.py
  tests/kernels/test_elementwise_gpu.py tests/kernels/test_attention_matmul_stats_gpu.py
  tests/runner/test_replay_gpu.py tests/runner/test_gpu_parity.py tests/kernels/test_cuda.py
)
STAGES=${*:-tests bench}
if [[ " $STAGES " == *" tests "* ]]; then
  echo "=== gpu tests $(date -u +%FT%TZ)"
  timeout -k 5 280 "$PY" -m pytest -q -m gpu -p no:cacheprovider -rfE "${TESTS[@]}" \
    2>&1 | tee "$OUT/gpu-tests-i12.log" | tail -25
  # the non-gpu tests of the same declarations (they also run in CI; cheap here)
  timeout -k 5 30 "$PY" -m pytest -q -p no:cacheprovider tests/test_quants.py \
    tests/kernels/test_launch_tape.py tests/kernels/test_cuda.py 2>&1 | tail -2
fi
if [[ " $STAGES " == *" bench "* ]]; then
  echo "=== bench $(date -u +%FT%TZ)"
  # every type's dequant and embed rows; add_f32/mul_f32 against torch.add (regression check)
  for only in 'dequant_*' 'embed_*' '[am][du][dl]_f32'; do
    tag=${only//[^a-z0-9_]/}
    timeout -k 5 90 "$PY" -m tracekit bench --backend cupy --only "$only" \
      --json "$OUT/bench-i12-$tag.json" 2>&1 | tee -a "$OUT/bench-i12.log" | tail -22
  done
fi

echo "=== summary"
"$PY" - "$OUT" <<'EOF'
import glob, json, re, sys
out = sys.argv[1]
try:
    log = open(f"{out}/gpu-tests-i12.log").read().strip()
except FileNotFoundError:
    log = ""
m = re.findall(r"(\d+) (passed|failed|skipped|error|errors)", log.splitlines()[-1] if log else "")
print("gpu tests:", ", ".join(f"{n} {w}" for n, w in m) or "no result line (see gpu-tests-i12.log)")
print(f"{'kernel':30s} {'% copy':>7s} {'ratio':>7s}  target / met")
seen = set()
for path in sorted(glob.glob(f"{out}/bench-i12-*.json")):
    for r in json.load(open(path))["rows"]:
        if r["kernel"] in seen or r["kernel"].startswith(("copy", "empty")):
            continue
        seen.add(r["kernel"])
        pct = "-" if r["pct_copy"] is None else f"{r['pct_copy']:.1f}"
        ratio = "-" if r.get("ratio") is None else f"{r['ratio']:.3f}"
        print(f"{r['kernel']:30s} {pct:>7s} {ratio:>7s}  {r['target']} / {r['met']}")
EOF
