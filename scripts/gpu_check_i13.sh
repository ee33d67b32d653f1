#!/usr/bin/env bash
# Issue 13's GPU check (the quant path's matvec, the f16 paths, decode speed, where the decode
# time goes), stages by name:
#   scripts/gpu_check_i13.sh mvtests mvbench paths decode trace     (each NAME or NAME:SECONDS)
# Run from the repo root on the GPU host (python3 with CuPy); logs under $OUT. Wheels the host
# lacks (gguf, jsonschema, ...) travel in .whl (see scripts/gpu_check.sh).
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"  # $OUT, the wheels, PYTHONPATH, the cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
Q05=$TRACEKIT_CACHE/synthetic-qwen2-0.5b-seed0.gguf
for spec in "$@"; do
  stage=${spec%%:*}; limit=${spec#*:}; [ "$limit" = "$spec" ] && limit=300
  echo "=== $stage (limit ${limit}s) $(date -u +%FT%TZ)"
  t() { timeout -k 5 "$limit" "$@"; }
  case $stage in
    mvtests) t python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_matvec_gpu.py \
               2>&1 | tee "$OUT/mv-tests.log" | tail -8 ;;
    mvbench) t python3 scripts/bench_matvec.py --shapes 14336x4096,4096x14336 --nt 1,2,8 \
               --sweep Q4_K,Q8_0,Q6_K,Q4_0 --json "$OUT/bench_matvec.json" 2>&1 \
               | tee "$OUT/bench_matvec.log" | sed -n '/^summary/,$p' ;;
    paths) t python3 -m pytest -q -m gpu -p no:cacheprovider -s tests/runner/test_matmul_paths_gpu.py \
             tests/runner/test_replay_gpu.py tests/runner/test_gpu_parity.py 2>&1 \
             | tee "$OUT/paths-tests.log" | grep -E "tolerance|passed|failed|Error" | tail -15 ;;
    decode)
      t python3 scripts/decode_speed.py demo qwen2-0.5b --backend cupy --matmul quant,f16 \
        --replay plan,graph --steps 64 2>&1 | tee "$OUT/decode.log" | tail -8
      t python3 scripts/decode_speed.py qwen2-0.5b --backend cupy --matmul f16 --w16-cache on \
        --replay graph --steps 64 2>&1 | tee -a "$OUT/decode.log" | tail -1 ;;
    trace)
      for mm in "quant --w16-cache off" "f16 --w16-cache on"; do
        name=$(echo "$mm" | tr -d ' -')
        t python3 -m tracekit record-trace "$Q05" --backend cupy --matmul $mm --capture timing \
          --cuda-graph --steps 6 --prompt "The kernel reads" -o "/tmp/q05-$name.json" --no-progress \
          2>&1 | tail -2
        t python3 scripts/trace_op_times.py "/tmp/q05-$name.json" 2>&1 | tee -a "$OUT/trace.log" | head -40
      done ;;
    *) echo "unknown stage $stage" ;;
  esac
  echo "=== $stage done rc=${PIPESTATUS[0]} $(date -u +%FT%TZ)"
done
