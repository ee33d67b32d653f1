#!/usr/bin/env bash
# tracekit's matrix-vector nodes against llama.cpp's, every quantized type at 14336 x 4096, both
# timed by Nsight Compute in one call (scripts/matvec_peer.py: what is timed and how).
# llama.cpp: test-backend-ops from the source vendored in the llama-cpp-python sdist, built
# with its MUL_MAT perf cases plus one of m = 14336, k = 4096, one token for each type (see
# BENCHMARKS.md for how the tarball was made), CUDA for sm_90, no FlashAttention kernels.
# Usage (GPU host): scripts/llama_matvec_peer.sh llama-src.tar.xz [/root/llama-tbo]; $OUT: logs
set -euo pipefail
cd "$(dirname "$0")/.."
src=$1
dest=${2:-/root/llama-tbo}
OUT=${OUT:-$(mktemp -d)}
# (later -D options win: tests on, and no FlashAttention kernels: test-backend-ops' MUL_MAT
# does not use them)
tbo=$(TARGET=test-backend-ops CMAKE_EXTRA="-DLLAMA_BUILD_TESTS=ON -DGGML_CUDA_FA=OFF" \
      bash scripts/build_llama_bench.sh "$src" "$dest")
NCU=(ncu --clock-control none --cache-control all --metrics gpu__time_duration.sum --csv
     --page raw --print-units base --print-kernel-base demangled)
# perf mode repeats a case many times: ncu profiles the first call's two launches (-c 2)
for t in q4_0 q4_1 q5_0 q5_1 q8_0 q2_K q3_K q4_K q5_K q6_K iq4_nl iq4_xs; do
  "${NCU[@]}" -k 'regex:mul_mat_vec|quantize_q8_1' -c 2 --log-file "$OUT/llama-$t.csv" \
    "$tbo" perf -o MUL_MAT -b CUDA0 -p "type_a=$t,type_b=f32,m=14336,n=1,k=4096," \
    > "$OUT/llama-$t.log" 2>&1
done
TRACEKIT_CACHE=/tmp/tk-peer-cache "${NCU[@]}" -k 'regex:^(mmvq|quantize_q8|matvec)' \
  --log-file "$OUT/ours.csv" python3 scripts/matvec_peer.py ours > "$OUT/ours.json"
python3 scripts/matvec_peer.py report "$OUT/ours.json" "$OUT/ours.csv" "$OUT"/llama-*.csv \
  | tee "$OUT/peer.md"
# the raw files in one archive (a device call brings back only a few files)
(cd "$OUT" && tar czf raw.tgz ./*.csv ./*.log ours.json && rm ./*.csv ./*.log ours.json)
