"""scripts/viz_bench.py's pooling of several runs (no browser: the numbers are made up)."""

from __future__ import annotations

from tests.scripts import load_script


def _bench_module():
    return load_script("viz_bench")


def _run(first, step, node, load0, load1):
    return {
        "samples_ms": {"first_render": first, "step_change": step, "node_change": node},
        "load_average_1m_start": load0,
        "load_average_1m": load1,
    }


def test_pool_takes_one_cold_load_per_run_and_pools_the_rest():
    vb = _bench_module()
    p = vb.pool(
        [
            _run([1500.0, 500.0, 400.0], [100.0, 300.0], [90.0], 1.0, 2.0),
            _run([1700.0, 450.0, 420.0], [120.0, 110.0], [95.0, 99.0], 3.0, 4.0),
        ]
    )
    assert p["runs"] == 2
    assert p["first_render_cold"] == {"median_ms": 1600.0, "max_ms": 1700.0, "min_ms": 1500.0,
                                      "n": 2}  # fmt: skip
    assert p["first_render"]["n"] == 4 and p["first_render"]["max_ms"] == 500.0
    assert p["step_change"]["median_ms"] == 115.0 and p["step_change"]["max_ms"] == 300.0
    assert p["node_change"]["n"] == 3
    assert p["load_average_1m"] == {"median": 2.5, "min": 1.0, "max": 4.0}
