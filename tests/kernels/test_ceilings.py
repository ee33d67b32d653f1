"""CPU tests of the ceilings: the NumPy measurement, the per-device cache and force=True."""

from __future__ import annotations

import json

import pytest

from tracekit.kernels.backend import NumpyBackend
from tracekit.kernels.ceilings import REQUIRED_KEYS, cache_path, measure_ceilings


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEKIT_CACHE", str(tmp_path))
    return tmp_path


def test_numpy_ceilings_measured_and_cached(cache):
    b = NumpyBackend()
    c = measure_ceilings(b)
    assert all(k in c for k in REQUIRED_KEYS)
    assert c["copy_bandwidth_Bps"] > 0 and c["launch_overhead_s"] > 0 and c["peak_flops"] > 0
    assert c["ridge_flop_per_byte"] == pytest.approx(c["peak_flops"] / c["copy_bandwidth_Bps"])
    assert c["device"] == b.device_name() and c["backend"] == "numpy"
    assert c["launch_floor_s"] == {"host": c["launch_overhead_s"]}
    assert c["peak_flops_by_path"] == {"f32_matmul": c["peak_flops"]}
    assert isinstance(c["method"], str) and "np.copyto" in c["method"]
    path = cache_path(b)
    assert path.parent == cache and path.name.startswith("ceilings-numpy-")
    assert json.loads(path.read_text()) == c


def test_cache_is_used_unless_forced(cache):
    b = NumpyBackend()
    c = measure_ceilings("numpy")
    path = cache_path(b)
    planted = dict(c, copy_bandwidth_Bps=123.0)
    path.write_text(json.dumps(planted))
    assert measure_ceilings(b)["copy_bandwidth_Bps"] == 123.0
    fresh = measure_ceilings(b, force=True)
    assert fresh["copy_bandwidth_Bps"] != 123.0
    assert json.loads(path.read_text()) == fresh


def test_broken_cache_is_remeasured(cache):
    b = NumpyBackend()
    path = cache_path(b)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"copy_bandwidth_Bps": 1')  # truncated JSON
    c = measure_ceilings(b)
    assert all(k in c for k in REQUIRED_KEYS)
    path.write_text('{"copy_bandwidth_Bps": 1}')  # valid JSON, keys missing
    assert "peak_flops" in measure_ceilings(b)


def test_a_stale_cupy_cache_is_remeasured():
    """A cupy cache from before mmq (its int8_tensor_core slot null) is stale: mmq's records
    are judged against that peak; so is one from before the read and write streams (a read
    stream can beat the copy: the bound model's bandwidth is the fastest)."""
    from tracekit.kernels.ceilings import _valid

    base = {k: 1.0 for k in REQUIRED_KEYS}
    peaks = {"f16_tensor_core": 1.0, "int8_dp4a": 1.0}
    fresh = dict(base, backend="cupy", launch_spacing_s={"stream": 1.0},
                 peak_flops_by_path=dict(peaks, int8_tensor_core=2.0),
                 read_bandwidth_Bps=1.0, write_bandwidth_Bps=1.0)  # fmt: skip
    assert _valid(fresh)
    assert not _valid(dict(fresh, peak_flops_by_path=dict(peaks, int8_tensor_core=None)))
    assert not _valid(dict(fresh, peak_flops_by_path=peaks))
    assert not _valid({k: v for k, v in fresh.items() if k != "read_bandwidth_Bps"})
    assert _valid(dict(base, backend="numpy", peak_flops_by_path={"f32_matmul": 1.0}))


def test_read_stream_reference_folds_whole_16_byte_words():
    import numpy as np

    from tracekit.kernels.ceilings import read_stream_reference

    words = np.array([0x11111111, 0x22222222, 0x44444444, 0x88888888, 0x0F0F0F0F], np.uint32)
    buf = words.view(np.uint8)
    # the fifth word is a partial 16-byte step: not read
    assert read_stream_reference(buf) == 0xFFFFFFFF
    assert read_stream_reference(buf[:15]) == 0
    assert read_stream_reference(np.concatenate([buf[:16], buf[:16]])) == 0
