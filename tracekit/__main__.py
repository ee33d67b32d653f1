"""``python -m tracekit`` = the ``tracekit`` command."""

from __future__ import annotations

import sys

try:  # a Ctrl-C while the CLI's imports load is an interruption, not a traceback
    from tracekit.cli import main
except KeyboardInterrupt:
    print("error: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
