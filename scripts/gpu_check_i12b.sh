#!/usr/bin/env bash
# Issue 12 (the speed of Q2_K, Q3_K, IQ4_NL, IQ4_XS) on a GPU host, in one call of <= 240 s:
#   OUT=/tmp/out scripts/gpu_check_i12b.sh          (repo root as cwd; logs under $OUT)
# 1. GPU parity, bit-exact: dequant + embed of the four types (edge sizes, poisoned outputs,
#    every table alignment, NaN/Inf scales), i.e. the word-wise dec8_w and byte-wise dec8 paths.
# 2. sweep_dequant.py over the direct variant (every swept type's winner) x chunks x threads (each
#    build is first checked bit for bit on aligned and unaligned raw and a clamped grid).
# 3. The sweep's best exact configuration is written into each class's dequant= (this copy of
#    tracekit/quants.py), and `tracekit bench --only 'dequant_*'` measures it against copy.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"  # $OUT, the wheels, PYTHONPATH, the cache
PY=${PYTHON:-python3}
TYPES=(Q2_K Q3_K IQ4_NL IQ4_XS)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/nvidia-smi.txt"

echo "=== gpu parity $(date -u +%FT%TZ)"
timeout -k 5 ${T_TESTS:-60} "$PY" -m pytest -q -m gpu -p no:cacheprovider -rfE \
  tests/kernels/test_dequant_embed_gpu.py tests/kernels/test_embed_align_gpu.py \
  -k "Q2_K or Q3_K or IQ4_NL or IQ4_XS" 2>&1 | tee "$OUT/gpu-tests-i12b.log" | tail -8

echo "=== sweep $(date -u +%FT%TZ)"
SWEEP_VARIANTS=${SWEEP_VARIANTS:-2} SWEEP_CHUNKS=${SWEEP_CHUNKS:-1,2,4,8} \
  timeout -k 5 ${T_SWEEP:-90} "$PY" scripts/sweep_dequant.py "${TYPES[@]}" 2>&1 | tee "$OUT/sweep-i12b.log"

echo "=== apply the sweep's best configuration to tracekit/quants.py"
"$PY" scripts/apply_sweep.py "$OUT/sweep-i12b.log" | tee "$OUT/apply-i12b.log"

echo "=== bench $(date -u +%FT%TZ)"
timeout -k 5 ${T_BENCH:-70} "$PY" -m tracekit bench --backend cupy --only 'dequant_*' \
  --json "$OUT/bench-i12b.json" 2>&1 | tee "$OUT/bench-i12b.log" | tail -20

echo "=== summary"
"$PY" - "$OUT" <<'PYEOF'
import json, re, sys
from pathlib import Path
out = Path(sys.argv[1])
def text(name):
    return (out / name).read_text() if (out / name).exists() else ""
last = (text("gpu-tests-i12b.log").strip().splitlines() or [""])[-1]
counts = re.findall(r"(\d+) (passed|failed|skipped|errors?)", last)
print("gpu parity:", ", ".join(f"{n} {w}" for n, w in counts) or "no result line")
sweep = text("sweep-i12b.log")
print("sweep BAD lines:", len(re.findall(r"^BAD ", sweep, re.M)))
print("sweep best:", *re.findall(r"^  (\w+\s+[\d.]+%.*)$", sweep, re.M), sep="\n  ")
print("applied:", text("apply-i12b.log").strip() or "nothing")
rows = json.loads(text("bench-i12b.json"))["rows"] if text("bench-i12b.json") else []
for r in rows:
    if r["kernel"].startswith(("dequant_", "copy")):
        pct = "-" if r["pct_copy"] is None else f"{r['pct_copy']:.1f}"
        print(f"{r['kernel']:24s} {pct:>6s}% of copy  {r['target']} / {r['met']}")
PYEOF
