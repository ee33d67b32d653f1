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


def test_own_times_are_each_launch_stamped_time():
    """gpu_own_times gives each launch its stamp slot: a read of 64 MB (past the L2 when
    rotated over four copies) has a positive own time no longer than its time per call back
    to back (which adds the gap to the next launch), and its XOR stays right while stamped."""
    cp = pytest.importorskip("cupy")
    from tracekit.kernels.ceilings import (
        gpu_own_times,
        gpu_times_queued,
        launch_read_stream,
        read_stream_kernel,
        read_stream_reference,
    )

    nbytes = 64 << 20
    raws = [cp.random.randint(0, 256, nbytes, dtype=cp.uint8) for _ in range(4)]
    fn = read_stream_kernel(8, False)
    word = cp.zeros(1, cp.uint32)

    def call(i):
        return launch_read_stream(fn, raws[i % len(raws)], word, 4)

    own = gpu_own_times(call, launches=8, reps=3)
    queued = gpu_times_queued(call, launches=8, reps=3)
    assert all(o > 0 for o in own)
    assert np.median(own) <= np.median(queued) * 1.02
    assert np.median(own) < 1e-3  # microseconds, not an unwritten slot read as a clock value
    word.fill(0)
    for i in range(4):  # each copy folded once: the XOR of the four
        call(i)
    want = 0
    for r in raws:
        want ^= read_stream_reference(cp.asnumpy(r))
    assert int(word.get()[0]) == want


def test_own_times_refuse_a_launch_that_cannot_time_itself():
    cp = pytest.importorskip("cupy")
    from tracekit.kernels.ceilings import gpu_own_times
    from tracekit.kernels.elementwise import launch_empty

    with pytest.raises(RuntimeError, match="is not stamped"):
        gpu_own_times(lambda i: launch_empty(), launches=2, reps=1, warmup=0)
    a = cp.zeros(16, cp.float32)
    with pytest.raises(RuntimeError, match="launched no stamped kernel"):
        gpu_own_times(lambda i: a.fill(1), launches=2, reps=1, warmup=0)
