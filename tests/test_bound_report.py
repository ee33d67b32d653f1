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


def test_an_alternating_trace_compares_its_own_stream_and_graph_steps(tmp_path: Path) -> None:
    """One trace whose replayed decode steps alternate graph and stream (here a NumPy trace
    relabelled so): its stream steps against its graph steps; one node slower in the stream
    steps alone fails, with its samples; a trace without alternate_modes is refused."""
    import copy
    import json

    mod = load_script("bound_report")
    assert mod.main(["--backend", "numpy", "--steps", "5", "--out", str(tmp_path), "demo"]) == 0
    a = json.loads(next(tmp_path.glob("bound-*-numpy.json")).read_text())
    with pytest.raises(ValueError, match="alternate_modes"):
        mod.alternating_agreement(a)
    t = copy.deepcopy(a)
    t["run"]["alternate_modes"] = True
    decode = [s for s in t["steps"] if s["kind"] == "decode"][1:]
    assert len(decode) == 4
    for j, s in enumerate(decode):
        s["launch_mode"] = "graph" if j % 2 == 0 else "stream"
    for s in decode:  # every node as fast in each step: the two modes agree
        for x, y in zip(s["nodes"], decode[0]["nodes"], strict=True):
            x["time_s"] = y["time_s"]
    lines = mod.alternating_agreement(t)
    assert "same buffers" in lines[0] and not any(x.startswith("FAIL") for x in lines), lines
    for s in decode:  # now the stream steps' first node 1.5x slower
        if s["launch_mode"] == "stream":
            s["nodes"][0]["time_s"] *= 1.5
    lines = mod.alternating_agreement(t)
    name = t["nodes"][decode[0]["nodes"][0]["id"]]["name"]
    assert lines[-1].startswith("FAIL")
    assert any(x.startswith(f"  {name}: without graphs ") for x in lines)
    info = mod.agreement(t, a, check=False)  # two traces, not a check: no FAIL line
    assert not any(x.startswith("FAIL") for x in info)
