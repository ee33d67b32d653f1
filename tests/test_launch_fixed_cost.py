"""scripts/launch_fixed_cost.py: a launch's own time split into a fixed cost and a rate."""

from __future__ import annotations

import json

import pytest

from tests.scripts import load_script


@pytest.fixture(scope="module")
def lfc():
    return load_script("launch_fixed_cost")


def _row(kind, n, nbytes, own_us, default=True):
    return {"type": "Q4_0", "n": n, "k": 4096, "kind": kind, "bytes": nbytes, "default": default,
            "us": own_us * 1.2, "own_us": own_us}  # fmt: skip


def test_a_known_line_comes_back(lfc) -> None:
    fixed, rate = lfc.fit([(33e6, 3.7e-6 + 33e6 / 3.0e12), (132e6, 3.7e-6 + 132e6 / 3.0e12)])
    assert fixed == pytest.approx(3.7e-6) and rate == pytest.approx(3.0e12)
    with pytest.raises(ValueError, match="two sizes"):
        lfc.fit([(33e6, 1e-5), (33e6, 1.1e-5)])
    with pytest.raises(ValueError, match="does not grow"):
        lfc.fit([(33e6, 2e-5), (132e6, 1e-5)])


def test_the_table_reads_the_default_kernels_and_the_floor(lfc, tmp_path, capsys) -> None:
    """Each default kernel and the floor get a row; a sweep's configuration (queued time only)
    does not; the allowed fixed cost is what 85% of copy leaves at the fitted rate."""
    small, big = 33_030_144, 132_120_576  # Q4_0 14336 x 4096 and 57344 x 4096
    rows = [
        _row("st", 14336, small, 3.7 + small / 3.0e6), _row("st", 57344, big, 3.7 + big / 3.0e6),
        _row("floor", 14336, small, 1.7 + small / 3.2e6),
        _row("floor", 57344, big, 1.7 + big / 3.2e6),
        _row("st", 14336, small, 99.0, default=False) | {"own_us": None},
        _row("mmvq", 14336, small, 16.0),  # one size: no fit, no row
    ]  # fmt: skip
    lines = lfc.table({"copy_GBps": 3000.0, "rows": rows})
    assert len(lines) == 4
    # times that do not grow with the bytes: the row says so instead of failing the bench
    noisy = [_row("mmvq", 14336, small, 20.0), _row("mmvq", 57344, big, 10.0)]
    assert "no fit: time does not grow" in lfc.table({"copy_GBps": 3000.0, "rows": noisy})[2]
    st = next(x for x in lines if "| mmvq_st |" in x)
    allowed = small / (0.85 * 3.0e12) - small / 3.0e12
    assert "| 3000 (100.0) | 3.70 |" in st and f"| {allowed * 1e6:.2f} |" in st
    assert "| read floor | 4096 | 33.0 / 132.1 | 3200 (106.7) | 1.70 |" in lines[3]
    path = tmp_path / "scale.json"
    path.write_text(json.dumps({"copy_GBps": 3000.0, "rows": rows}))
    assert lfc.main([str(path)]) == 0
    assert "copy bandwidth 3000 GB/s" in capsys.readouterr().out
