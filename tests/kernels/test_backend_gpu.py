"""CupyBackend.to_host: small arrays come back through pinned memory, each call its own
array; large or strided ones the pageable way; the values the same either way."""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.kernels.backend import CupyBackend, get_backend

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def be():
    pytest.importorskip("cupy")
    return get_backend("cupy")


@pytest.mark.parametrize(
    "shape", [(), (0,), (1, 151936), (3, 5), (CupyBackend.PINNED_MAX_BYTES // 4 + 1,)]
)
def test_to_host_values_and_ownership(be, shape) -> None:
    rng = np.random.default_rng(0)
    want = rng.standard_normal(shape).astype(np.float32)
    d = be.xp.asarray(want)  # (be.asarray makes a 0-d array 1-d, as ascontiguousarray does)
    a, b = be.to_host(d), be.to_host(d)
    assert a.shape == want.shape and a.dtype == want.dtype
    np.testing.assert_array_equal(a, want)
    if a.size:
        a.reshape(-1)[0] = -7.0  # the caller owns it: another call's array is untouched
        assert b.reshape(-1)[0] == want.reshape(-1)[0]


def test_to_host_of_a_host_array_is_that_array(be) -> None:
    """A runner's step may already be on the host (NumPy logits): to_host passes it on."""
    want = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = be.to_host(want)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, want)


def test_to_host_strided(be) -> None:
    want = np.arange(60, dtype=np.float32).reshape(6, 10)
    got = be.to_host(be.asarray(want)[:, ::3])
    np.testing.assert_array_equal(got, want[:, ::3])
