#!/usr/bin/env bash
# Set up (venv, packages, Chromium for the browser tests) and run the whole test suite.
# GPU tests skip cleanly here; on a GPU host run: .venv/bin/python -m pytest -m gpu
set -euo pipefail
cd "$(dirname "$0")/.."
SETUP_BROWSER=1 scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
