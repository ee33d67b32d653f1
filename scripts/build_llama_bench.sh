#!/usr/bin/env bash
# Build llama.cpp's llama-bench (CUDA, sm_90) from the source vendored in the llama-cpp-python
# sdist, for the side-by-side speed comparison (scripts/vs_llama.py). On this machine:
#   pip download llama-cpp-python==0.3.36 --no-deps --no-binary :all:
#   tar xzf llama_cpp_python-0.3.36.tar.gz; cd llama_cpp_python-0.3.36/vendor
#   rm -rf llama.cpp/{models,docs,media,benches,tools/ui}  # and ggml/src backends other than cpu/cuda
#   tar cJf llama-src.tar.xz llama.cpp                      # about 5 MB
# On the GPU host: scripts/build_llama_bench.sh llama-src.tar.xz /root/llama  (about 4 min, 16 cores)
# Another target: TARGET=test-backend-ops CMAKE_EXTRA="-DLLAMA_BUILD_TESTS=ON -DGGML_CUDA_FA=OFF"
# (scripts/llama_matvec_peer.sh). Prints the built program's path.
set -euo pipefail
src=$1
dest=${2:-/root/llama}
target=${TARGET:-llama-bench}
mkdir -p "$dest"
if [ ! -x "$dest/llama.cpp/build/bin/$target" ]; then
  [ -d "$dest/llama.cpp" ] || tar xJf "$src" -C "$dest"
  # shellcheck disable=SC2086  # CMAKE_EXTRA: several options
  cmake -S "$dest/llama.cpp" -B "$dest/llama.cpp/build" -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release \
    ${CMAKE_EXTRA:-} >/dev/null
  cmake --build "$dest/llama.cpp/build" --target "$target" -j"$(nproc)" >/dev/null
fi
echo "$dest/llama.cpp/build/bin/$target"
