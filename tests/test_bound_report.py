"""scripts/bound_report.py on the NumPy backend: the report's parts, from a real recorded trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scripts import load_script


def test_bound_report_on_numpy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mod = load_script("bound_report")
    rc = mod.main(["--backend", "numpy", "--steps", "1", "--out", str(tmp_path), "demo"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "decode 1 (host)" in out and "classes: " in out
    assert "breakdown: span " in out and "+ host wait " in out
    assert out.count("\n  ") >= 10  # ten lowest-efficiency nodes, each with its reason
    assert "CPU time of the nodes" in out and "output: " in out
    assert list(tmp_path.glob("bound-*-numpy.json"))
