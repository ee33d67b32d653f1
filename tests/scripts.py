"""Importing a script of ``scripts/`` as a module, for the tests of its pieces."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as the module ``name`` (registered in sys.modules: dataclasses and
    pickling in worker processes look it up there)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def run_script(name: str, args: list[str], cache: Path, timeout: int = 300, **env: str):
    """``scripts/<name>.py args`` in a subprocess (a GPU test's run of a script), this checkout
    first on PYTHONPATH, then what the run had (a GPU host's wheels live there), and its own
    tracekit cache folder (ceilings measured beside other tests' launches stay out of the shared
    one). Returns the CompletedProcess, output captured as text."""
    import os
    import subprocess

    path = os.pathsep.join(p for p in (str(SCRIPTS.parent), os.environ.get("PYTHONPATH")) if p)
    full = dict(os.environ, PYTHONPATH=path, TRACEKIT_CACHE=str(cache), **env)
    return subprocess.run([sys.executable, str(SCRIPTS / f"{name}.py"), *args],
                          capture_output=True, text=True, env=full, timeout=timeout)  # fmt: skip
