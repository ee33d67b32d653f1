#!/usr/bin/env bash
# Issue 14 on a GPU host (repo root as cwd, python3 with CuPy): stages chosen by name,
#   scripts/gpu_check_i14.sh tests diff speed
#   tests: the new kernels' parity (softcap, slice_cols, rope freq factors) and the five converted
#          architectures on CuPy (node by node vs NumPy; vs HF fp32 where torch is installed)
#   diff:  record-trace on cupy and numpy for each q8_0 file, then `tracekit diff` (default tolerance)
#   speed: decode tokens/s of the synthetic Llama-3-8B-shaped model (written once, 4.6 GB of
#          random Q4_K blocks, about a minute the first time)
# Logs under $OUT; a summary table at the end.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"  # $OUT, the wheels, PYTHONPATH, the cache
declare -a SUMMARY
for stage in "$@"; do
  echo "=== $stage $(date -u +%FT%TZ)"
  case $stage in
    tests)
      timeout -k 5 300 python3 -m pytest -q -m gpu -p no:cacheprovider \
        tests/kernels/test_arch_kernels_gpu.py tests/runner/test_archs_gpu.py 2>&1 | tee "$OUT/i14-gpu-tests.log" | tail -25
      SUMMARY+=("tests: $(tail -1 "$OUT/i14-gpu-tests.log")") ;;
    diff)
      for a in llama3 mistral qwen3 phi3 gemma2; do
        f=tests/data/archs/$a/$a-q8_0.gguf
        for be in cupy numpy; do
          timeout -k 5 120 python3 -m tracekit record-trace "$f" --tokens 1,17,100,200,33,7,8,9,150,12,44,45 \
            --steps 8 --backend $be -o "$OUT/i14-$a-$be.json" --no-progress > "$OUT/i14-$a-$be.log" 2>&1
        done
        timeout -k 5 120 python3 -m tracekit record-trace "$f" --tokens 1,17,100,200,33,7,8,9,150,12,44,45 \
          --steps 8 --backend cupy --cuda-graph -o "$OUT/i14-$a-cupy-graph.json" --no-progress > "$OUT/i14-$a-graph.log" 2>&1 \
          || SUMMARY+=("graph $a: FAILED, see $OUT/i14-$a-graph.log")
        timeout -k 5 120 python3 -m tracekit diff "$OUT/i14-$a-cupy.json" "$OUT/i14-$a-numpy.json" > "$OUT/i14-$a-diff.txt" 2>&1
        rc=$?
        SUMMARY+=("diff $a: rc=$rc $(head -1 "$OUT/i14-$a-diff.txt")")
      done ;;
    speed)
      timeout -k 5 580 python3 scripts/decode_speed.py --backend cupy --steps 32 llama3-8b 2>&1 | tee "$OUT/i14-decode-speed.log" | tail -20
      SUMMARY+=("speed: see $OUT/i14-decode-speed.log (last line: $(tail -1 "$OUT/i14-decode-speed.log"))") ;;
    *) echo "unknown stage $stage" ;;
  esac
done
echo "=== summary"
printf '%s\n' "${SUMMARY[@]}"
