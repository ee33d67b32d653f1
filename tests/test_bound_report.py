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


def test_agreement_lists_the_samples_of_the_nodes_apart(tmp_path: Path) -> None:
    """The graph/stream agreement on two recorded traces (one a copy with one node's times
    scaled in two of its three replayed steps): the node is outside 15% and its samples in
    both modes are printed, so a bimodal effect shows; identical traces pass."""
    import copy
    import json

    mod = load_script("bound_report")
    assert mod.main(["--backend", "numpy", "--steps", "4", "--out", str(tmp_path), "demo"]) == 0
    a = json.loads(next(tmp_path.glob("bound-*-numpy.json")).read_text())
    assert mod.agreement(a, copy.deepcopy(a))[0].startswith("node time without / with graphs: ")
    assert not any(line.startswith("FAIL") for line in mod.agreement(a, copy.deepcopy(a)))
    b = copy.deepcopy(a)
    decode = [s for s in b["steps"] if s["kind"] == "decode"][1:]
    assert len(decode) == 3
    for s in decode[:2]:
        s["nodes"][0]["time_s"] *= 1.5
    lines = mod.agreement(b, a)
    name = a["nodes"][decode[0]["nodes"][0]["id"]]["name"]
    assert lines[-1].startswith("FAIL")
    sample = next(line for line in lines if line.startswith(f"  {name}: without graphs "))
    assert sample.count(" us") == 2 and len(sample.split("with graphs")[1].split()) == 4
