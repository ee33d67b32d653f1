"""``python -m tracekit`` = the ``tracekit`` command."""

from __future__ import annotations

import sys

from tracekit.cli import main

sys.exit(main())
