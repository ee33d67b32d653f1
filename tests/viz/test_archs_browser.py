"""The dashboard's overview shows the architecture settings of a converted gemma2 / mistral
file (rope, soft-caps, window per layer, the trace's notes), in headless Chromium."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.runner.test_archs import gguf_path
from tracekit.viz.app import create_app

TIMEOUT = 10  # s; a render takes well under one


@pytest.fixture(scope="module")
def arch_traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from tracekit.runner.record import record_trace

    out = tmp_path_factory.mktemp("arch-traces")
    return {
        name: Path(
            record_trace(
                gguf_path(name, "q8_0"),
                tokens=[1, 17, 100, 200, 33, 7],
                steps=2,
                backend="numpy",
                output=out / f"{name}.json",
                progress=False,
                nvtx=False,
            )  # fmt: skip
        )
        for name in ("gemma2", "mistral")
    }


def _overview(dash_duo: Any, path: Path) -> str:
    dash_duo.start_server(create_app([path]))
    dash_duo.wait_for_element(".tab", timeout=TIMEOUT)
    next(e for e in dash_duo.find_elements(".tab") if e.text == "Overview").click()
    dash_duo.wait_for_element("#slowest-nodes", timeout=TIMEOUT)
    return dash_duo.find_element("body").text


def test_overview_shows_gemma2_soft_caps_and_windows(dash_duo: Any, arch_traces) -> None:
    text = _overview(dash_duo, arch_traces["gemma2"])
    assert "logit soft-cap 5" in text and "soft-cap 3" in text
    assert "4, full, 4" in text and "neox pairs, base 10000" in text
    assert dash_duo.get_logs() == []


def test_overview_shows_the_mistral_note(dash_duo: Any, arch_traces) -> None:
    text = _overview(dash_duo, arch_traces["mistral"])
    assert "Mistral stored as arch llama" in text and "full ×2" in text
    assert dash_duo.get_logs() == []
