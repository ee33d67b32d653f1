#!/usr/bin/env bash
# The main job on the embedded default: set up, generate the demo model (no download), record a
# full trace of prefill + 8 decode steps (CuPy when a GPU is usable, else NumPy), summarise it.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "demo: setting up (its steps follow; the first run takes a few minutes)" >&2
scripts/setup.sh >/dev/null
echo "demo: recording the demo model (prefill + 8 decode steps)" >&2
.venv/bin/record-trace --prompt "The kernel reads" --steps 8 -o traces/demo-local.json "$@"
.venv/bin/tracekit diff traces/demo-local.json traces/demo-local.json >/dev/null
echo "open it: .venv/bin/tracekit viz traces/demo-local.json   (http://127.0.0.1:8050)"
