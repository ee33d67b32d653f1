"""The Compare tab with tensor dumps: the same report as ``tracekit diff`` (calibrated tolerance,
largest deviation, the node that introduced the error), and a link that selects that node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.trace.test_tensors import plant, record
from tracekit.model.demo import write_demo_model
from tracekit.trace.format import load_trace
from tracekit.viz.app import compare_report, create_app

TIMEOUT = 30  # s: a loaded 2-core box


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    d = tmp_path_factory.mktemp("cmp")
    base = write_demo_model(d / "demo.gguf")
    plant(base, d / "bias.gguf", "blk.1.attn_v.bias", 17, 0.01)
    out = [d / "a.json", d / "b.json"]
    for m, o in zip((base, d / "bias.gguf"), out, strict=True):
        assert record(m, o, "--dump", ".*", steps=2) == 0
    return out


def test_compare_report_is_tracekit_diffs(pair: list[Path]) -> None:
    a, b = (load_trace(p) for p in pair)
    r = compare_report(a, b, pair)
    assert r.path.name == "f32-cpu" and r.rtol == 1e-5
    assert r.tensors is not None and r.tensors.first_introduced.node == "blk.1.attn_v"
    assert "largest deviation:" in r.text()
    # a sidecar that fails its checksum is said, and the statistics are still compared
    side = pair[1].with_name(b["tensors"]["file"])
    keep = side.read_bytes()
    try:
        side.write_bytes(keep[:-1] + bytes([keep[-1] ^ 1]))
        r2 = compare_report(a, b, pair)
        assert r2.tensors is None and any("not this trace's sidecar" in n for n in r2.notes)
        assert r2.first_divergence is not None
    finally:
        side.write_bytes(keep)


@pytest.mark.browser
@pytest.mark.slow
def test_compare_tab_names_the_node_that_broke_it(dash_duo: Any, pair: list[Path]) -> None:
    dash_duo.start_server(create_app(pair))
    dash_duo.wait_for_contains_text("#step-info", "prefill", timeout=TIMEOUT)
    next(e for e in dash_duo.find_elements(".tab") if e.text == "Compare").click()
    dash_duo.wait_for_contains_text("#first-introduced", "blk.1.attn_v at", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#diff-report", "path: f32-cpu", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#diff-report", "largest tensor deviation", timeout=TIMEOUT)
    dash_duo.find_element("#first-introduced .tk-link").click()
    dash_duo.wait_for_text_to_equal("#detail-name", "blk.1.attn_v", timeout=TIMEOUT)
    assert dash_duo.get_logs() == []
