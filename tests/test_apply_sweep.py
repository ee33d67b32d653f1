"""scripts/apply_sweep.py: the sweep's best configuration per type lands in that type's class
line of tracekit/quants.py (added, or replacing the one there), and nothing else changes."""

from __future__ import annotations

import re

import pytest

from tests.scripts import load_script

apply_sweep = load_script("apply_sweep")
LOG = """copy 4222 GB/s
direct  block 128 chunks  4: Q2_K  91.0%  IQ4_XS  90.2%
CONFIG = {
    _T.Q2_K: KernelConfig(2, 256, 8),
    _T.Q4_K: KernelConfig(2, 128, 2),
}
"""


def test_configs_land_in_their_class_lines() -> None:
    src = apply_sweep.QUANTS.read_text()
    out, done = apply_sweep.apply(LOG, src)
    assert done == ["Q2_K: DequantConfig(2, 256, 8)", "Q4_K: DequantConfig(2, 128, 2)"]
    # each class's argument list (one line, or wrapped by ruff format) carries its new config
    heads = dict(re.findall(r"^class (\w+)\((.*?)\):", out, re.M | re.S))
    assert "dequant=DequantConfig(2, 256, 8)" in heads["Q2_K"]
    assert re.search(r"f16_fields=\(0, 2\),\s*dequant=DequantConfig\(2, 128, 2\)", heads["Q4_K"])
    assert heads["Q2_K"].count("DequantConfig") == heads["Q4_K"].count("DequantConfig") == 1
    assert len(src.splitlines()) == len(out.splitlines())
    changed = [a for a, b in zip(src.splitlines(), out.splitlines(), strict=True) if a != b]
    assert len(changed) == 2
    assert apply_sweep.apply(LOG, out)[0] == out  # applying twice changes nothing more


def test_an_unknown_type_is_refused() -> None:
    with pytest.raises(SystemExit, match="Q9_K: no `class Q9_K"):
        apply_sweep.apply("    _T.Q9_K: KernelConfig(2, 128, 4),\n", apply_sweep.QUANTS.read_text())
