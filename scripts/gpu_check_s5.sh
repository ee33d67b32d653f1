#!/usr/bin/env bash
# Session 5's GPU check (mmvq, the quant path with 8-bit activations), stages by name:
#   scripts/gpu_check_s5.sh parity mvsweep calib decode side   (each NAME or NAME:SECONDS)
# side needs .llama carried (carry [".whl", ".llama"]) and ~8 minutes: give it side:560 alone.
# Run from the repo root on the GPU host; logs under $OUT.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
for spec in "$@"; do
  stage=${spec%%:*}; limit=${spec#*:}; [ "$limit" = "$spec" ] && limit=300
  echo "=== $stage (limit ${limit}s) $(date -u +%FT%TZ)"
  t() { timeout -k 5 "$limit" "$@"; }
  case $stage in
    parity) t python3 -m pytest -q -m gpu -p no:cacheprovider -n 8 -s tests/runner/test_archs_gpu.py \
              tests/runner/test_gpu_parity.py tests/runner/test_tensors_gpu.py \
              tests/runner/test_matmul_paths_gpu.py tests/kernels/test_matvec_gpu.py 2>&1 \
              | tee "$OUT/parity.log" | grep -E "worst|max \||largest|passed|failed|FAILED|Error|chose" | tail -40 ;;
    mvsweep) t python3 scripts/bench_matvec.py --shapes 14336x4096 --nt 1 \
               --sweep Q4_K,Q6_K,Q3_K --json "$OUT/bm.json" > "$OUT/bm.log" 2>&1
             sed -n '/^summary/,$p' "$OUT/bm.log"
             grep " wps=" "$OUT/bm.log" | sort -k7 -n -r | head -0 ;;
    calib)
      for m in demo tests/data/archs/llama3/llama3-q8_0.gguf tests/data/archs/gemma2/gemma2-q8_0.gguf; do
        src=$m; [ "$m" = demo ] && src=$(python3 -c "from tracekit.model.demo import demo_model_path as p; print(p())")
        n=$(basename "$m" .gguf)
        t python3 -m tracekit record-trace "$src" --backend cupy --steps 6 --prompt "The kernel reads" \
          --no-progress -o "/tmp/g-$n.json" > /dev/null 2>&1
        t python3 -m tracekit record-trace "$src" --backend numpy --steps 6 --prompt "The kernel reads" \
          --no-progress -o "/tmp/c-$n.json" > /dev/null 2>&1
        echo "--- $n GPU quant vs CPU f32"
        t python3 -m tracekit diff "/tmp/g-$n.json" "/tmp/c-$n.json" --rtol 1 2>&1 | grep -iE "largest|path|diverg" | head -4
      done ;;
    side)  # llama.cpp side by side in ONE call: a background build does not outlive its call
      [ -x /root/llama/llama.cpp/build/bin/llama-bench ] || \
        t bash scripts/build_llama_bench.sh .llama/llama-src.tar.xz /root/llama > "$OUT/build.log" 2>&1
      tail -2 "$OUT/build.log"
      t python3 scripts/vs_llama.py --llama-bench /root/llama/llama.cpp/build/bin/llama-bench \
        qwen2-0.5b llama3-8b 2>&1 | tee "$OUT/side.log" | tail -12 ;;
    decode) t python3 scripts/decode_speed.py qwen2-0.5b --backend cupy --matmul quant --replay graph \
              --steps 64 2>&1 | tail -1 ;;
    *) echo "unknown stage $stage" ;;
  esac
  echo "=== $stage done $(date -u +%FT%TZ)"
done
