"""Sweep the dequant kernels' tile shape (threads per block x 16-byte chunks per thread) for every
quant type at >= 256 MB of packed weights, against the device's copy bandwidth, in one run."""

from __future__ import annotations

import itertools
import sys

import cupy as cp
import numpy as np

from tracekit.kernels import cuda, dequant
from tracekit.kernels.ceilings import gpu_times, median
from tracekit.quants import QUANTIZED_TYPES

ROW = 4096
PACKED = 256 * 2**20
rng = np.random.default_rng(0)


def copy_gbps() -> float:
    a, b = cp.empty(PACKED * 2, cp.uint8), cp.empty(PACKED * 2, cp.uint8)
    t = median(gpu_times(lambda i: b.__setitem__(slice(None), a), warmup=3, iters=20))
    return 2 * a.nbytes / t / 1e9


copy = copy_gbps()
print(f"copy {copy:.0f} GB/s")
only = sys.argv[1:] or [qt.name for qt in QUANTIZED_TYPES]
inputs = {}
for qt in QUANTIZED_TYPES:
    if qt.name not in only:
        continue
    rows = PACKED // qt.row_bytes(ROW)
    raw = cp.asarray(dequant.random_blocks(qt, rows * ROW // qt.block_size, rng).reshape(-1))
    inputs[qt.name] = (qt, (rows, ROW), raw, cp.empty((rows, ROW), cp.float16))
base_options, base_block, base_cpt = cuda._OPTIONS, dequant.BLOCK, dequant.CHUNKS_PER_THREAD
for block, cpt in itertools.product((128, 256, 512), (1, 2, 4, 8)):
    cuda._OPTIONS = (*base_options, f"-DCHUNKS_PER_THREAD={cpt}")
    cuda.module.cache_clear()
    dequant.BLOCK, dequant.CHUNKS_PER_THREAD = block, cpt
    cells = []
    for name, (qt, shape, raw, out) in inputs.items():
        t = median(
            gpu_times(lambda i, a=(raw, qt, shape), o=out: dequant.launch_dequantize_f16(*a, out=o))
        )
        cells.append(f"{name} {100 * (raw.nbytes + out.nbytes) / t / 1e9 / copy:5.1f}%")
    print(f"block {block:3d} chunks/thread {cpt}: " + "  ".join(cells), flush=True)
cuda._OPTIONS, dequant.BLOCK, dequant.CHUNKS_PER_THREAD = base_options, base_block, base_cpt
