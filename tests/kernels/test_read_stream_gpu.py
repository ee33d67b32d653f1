"""GPU test of the read floor (ceilings.read_stream, bench_matvec's reference reader): its XOR
of a buffer's whole 16-byte words equals NumPy's, at edge sizes and grids (marked ``gpu``)."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("unroll,hint", [(1, False), (4, False), (8, False), (16, True)])
@pytest.mark.parametrize("nbytes", [0, 15, 16, 17, 4096 + 48, 3 * 132 * 256 * 16 + 160, 33_030_144])
def test_read_stream_matches_numpy(unroll, hint, nbytes):
    cp = pytest.importorskip("cupy")
    from tracekit.kernels.ceilings import (
        launch_read_stream,
        read_stream_kernel,
        read_stream_reference,
    )

    host = np.random.default_rng(nbytes + unroll).integers(0, 256, nbytes, dtype=np.uint8)
    fn = read_stream_kernel(unroll, hint)
    buf = cp.asarray(host)
    poison = 0xDEADBEEF  # the kernel folds into the word it is given
    out = cp.full(1, poison, cp.uint32)
    launch_read_stream(fn, buf, out, 4)
    assert int(out.get()[0]) == poison ^ read_stream_reference(host)


def test_read_stream_refuses_a_misaligned_buffer():
    cp = pytest.importorskip("cupy")
    from tracekit.kernels.ceilings import launch_read_stream, read_stream_kernel

    buf = cp.zeros(64, cp.uint8)
    with pytest.raises(ValueError, match="3 bytes past a 16-byte boundary"):
        launch_read_stream(read_stream_kernel(4), buf[3:], cp.zeros(1, cp.uint32), 4)
