"""scripts/setup.sh and scripts/demo.sh say what they are doing (issue 16: demo.sh was silent for
~2 minutes on a fresh machine). Both run for real here, in a copy of the repo's scripts folder,
against a stub venv whose python/record-trace/tracekit only log their arguments."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

STUB = """#!/usr/bin/env bash
echo "$(basename "$0") $*" >> "$(dirname "$0")/../../calls.log"
"""


def _sandbox(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    for name in ("setup.sh", "demo.sh"):
        shutil.copy(REPO / "scripts" / name, root / "scripts" / name)
    bin_ = root / ".venv" / "bin"
    bin_.mkdir(parents=True)
    for tool in ("python", "record-trace", "tracekit"):
        p = bin_ / tool
        p.write_text(STUB)
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return root


def _run(root: Path, script: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SETUP_BROWSER"}
    return subprocess.run(
        ["bash", str(root / "scripts" / script)], capture_output=True, text=True, env=env,
        timeout=60, check=False,
    )  # fmt: skip


def test_setup_reports_each_step_on_stderr(tmp_path: Path) -> None:
    root = _sandbox(tmp_path)
    r = _run(root, "setup.sh")
    assert r.returncode == 0, r.stderr
    steps = [ln for ln in r.stderr.splitlines() if ln.startswith("setup: ")]
    assert len(steps) >= 3 and any("upgrading pip" in s for s in steps), r.stderr
    calls = (root / "calls.log").read_text()
    assert "python -m pip install" in calls  # the steps it announced ran


def test_demo_says_what_it_does_while_setup_output_is_hidden(tmp_path: Path) -> None:
    root = _sandbox(tmp_path)
    r = _run(root, "demo.sh")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert lines[0].startswith("demo: setting up"), r.stderr
    assert any(ln.startswith("setup: ") for ln in lines)  # setup's progress is not swallowed
    assert any(ln.startswith("demo: recording") for ln in lines)
    assert "record-trace --prompt" in (root / "calls.log").read_text()
