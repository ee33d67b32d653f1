"""scripts/vs_llama.py's pieces that run without a GPU: its --tk-arg values."""

from __future__ import annotations

import pytest

from tests.scripts import load_script


@pytest.mark.parametrize(
    ("text", "want"),
    [("on", True), ("OFF", False), ("true", True), ("no", False), ("512", 512), ("-3", -3),
     ("graph", "graph")],
)  # fmt: skip
def test_tk_arg_values(text: str, want: object) -> None:
    got = load_script("vs_llama")._value(text)
    assert got == want and type(got) is type(want)  # "off" is False, never a truthy string
