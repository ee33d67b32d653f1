"""Sweep the dequant kernels' variants (dequant.VARIANTS) x threads per block x 16-byte chunks per
thread (the warp variants: per lane per step, x their steps per run) for every quant type at >= 256
MB of packed weights, against the device's copy bandwidth, in one run; every build is first
checked bit for bit against the NumPy reference on a few thousand random blocks per type
(aligned, 2-byte and 3-byte misaligned raw, a clamped grid).

    .venv/bin/python scripts/sweep_dequant.py [TYPE ...]

Prints one line per (variant, block, chunks) with each type's % of copy, BAD lines for any
mismatch, then the best exact configuration per type as a CONFIG table for dequant.py.
Each (variant, chunks[, steps]) is one NVRTC build (~5 s); block sizes reuse it.
SWEEP_CHUNKS_V<variant> overrides SWEEP_CHUNKS for one variant. Q3_K's candidates against its
declared configuration, direct with 1 chunk (issue 12; 10 builds, under 2 minutes on an H200):

    SWEEP_VARIANTS=2,3,4 SWEEP_CHUNKS_V2=1 SWEEP_CHUNKS_V3=1,4 SWEEP_CHUNKS_V4=4 \
        SWEEP_WARP_STEPS=1,4,16 .venv/bin/python scripts/sweep_dequant.py Q3_K
"""

from __future__ import annotations

import os
import sys
import time

import cupy as cp
import numpy as np

from tracekit.kernels import cuda, dequant
from tracekit.kernels.ceilings import gpu_times, median
from tracekit.quants import QUANTIZED_TYPES

ROW = 4096
PACKED = 256 * 2**20
CHECK_BLOCKS = 4099  # per type: not a multiple of any tile, so the last tile is partial
SMEM_LIMIT = 48 * 1024  # dynamic shared memory without an opt-in attribute
# Override from the environment for a narrower sweep: SWEEP_BLOCKS=128,256 SWEEP_CHUNKS=2,4
BLOCKS = tuple(int(b) for b in os.environ.get("SWEEP_BLOCKS", "128,256").split(","))
CHUNKS = tuple(int(c) for c in os.environ.get("SWEEP_CHUNKS", "4,8,16").split(","))
VARIANT_IDS = tuple(int(v) for v in os.environ.get("SWEEP_VARIANTS", "0,1,2,3,4").split(","))
# the warp variants' steps per run (dequant.WARP_STEPS); one build each
WARP_STEPS = tuple(int(s) for s in os.environ.get("SWEEP_WARP_STEPS", "4").split(","))
rng = np.random.default_rng(0)
t_start = time.perf_counter()


def copy_gbps() -> float:
    a, b = cp.empty(PACKED * 2, cp.uint8), cp.empty(PACKED * 2, cp.uint8)
    t = median(gpu_times(lambda i: b.__setitem__(slice(None), a), warmup=3, iters=20))
    return 2 * a.nbytes / t / 1e9


_built: list[tuple[int, int, int]] = []


def set_config(variant: int, block: int, chunks: int, steps: int) -> None:
    for t in dequant.CONFIG:
        dequant.CONFIG[t] = dequant.KernelConfig(variant, block, chunks)
    dequant.WARP_STEPS = steps
    # the instantiations are generated from CONFIG and WARP_STEPS: a new (variant, chunks,
    # steps) is a new build (the block size is a launch parameter: no rebuild)
    if _built[-1:] != [(variant, chunks, steps)]:
        _built.append((variant, chunks, steps))
        cuda.module.cache_clear()
        cuda.kernel.cache_clear()


def fits(qt) -> bool:
    return dequant.launch_smem_bytes(qt) <= SMEM_LIMIT


copy = copy_gbps()
print(f"copy {copy:.0f} GB/s", flush=True)
only = sys.argv[1:] or [qt.name for qt in QUANTIZED_TYPES]
types = [qt for qt in QUANTIZED_TYPES if qt.name in only]

# exactness inputs: finite random blocks plus raw random bytes (NaN/Inf scales), host reference
checks = {}
for qt in types:
    fin = dequant.random_blocks(qt, CHECK_BLOCKS, rng)
    wild = rng.integers(0, 256, CHECK_BLOCKS * qt.type_size, dtype=np.uint8)
    raw = np.concatenate([fin, wild])
    shape = (2 * CHECK_BLOCKS, qt.block_size)
    want, _ = dequant.ref_dequantize_f16(raw, qt, shape)
    checks[qt.name] = (raw, shape, want)

inputs = {}
for qt in types:
    rows = PACKED // qt.row_bytes(ROW)
    raw = cp.asarray(dequant.random_blocks(qt, rows * ROW // qt.block_size, rng).reshape(-1))
    inputs[qt.name] = (qt, (rows, ROW), raw, cp.empty((rows, ROW), cp.float16))


def check_exact(tag: str) -> set[str]:
    """Names of the types whose current build differs from the reference (BAD lines printed)."""
    bad = set()
    for qt in types:
        raw, shape, want = checks[qt.name]
        for offset, max_grid in ((0, 2**31 - 1), (0, 7), (2, 2**31 - 1), (3, 2**31 - 1)):
            buf = cp.empty(raw.size + 16, cp.uint8)
            view = buf[offset : offset + raw.size]
            view.set(raw)
            got, _ = dequant.launch_dequantize_f16(view, qt, shape, max_grid=max_grid)
            g = got.get()
            ok = (g.view(np.uint16) == want.view(np.uint16)) | (np.isnan(g) & np.isnan(want))
            if not ok.all():
                blk = int(np.argwhere(~ok)[0][0])
                print(
                    f"BAD {tag} {qt.name} offset {offset} max_grid {max_grid}: "
                    f"{int((~ok).sum())} values differ, first in block {blk}",
                    flush=True,
                )
                bad.add(qt.name)
    return bad


base, base_steps = dict(dequant.CONFIG), dequant.WARP_STEPS
best: dict[str, tuple[float, dequant.KernelConfig, int]] = {}
builds = [
    (v, c, s)
    for v in VARIANT_IDS
    for c in (
        tuple(int(x) for x in os.environ[f"SWEEP_CHUNKS_V{v}"].split(","))
        if f"SWEEP_CHUNKS_V{v}" in os.environ
        else CHUNKS
    )
    for s in (WARP_STEPS if dequant.VARIANTS[v] in dequant.WARP_VARIANTS else (base_steps,))
]
for variant, chunks, steps in builds:
    vname = dequant.VARIANTS[variant]
    warp = vname in dequant.WARP_VARIANTS
    tag = f"{vname} chunks {chunks}" + (f" steps {steps}" if warp else "")
    set_config(variant, 128, chunks, steps)
    try:
        bad = check_exact(tag)
    except cp.cuda.driver.CUDADriverError as e:  # e.g. too many registers for the block
        print(f"{tag}: cannot launch ({e})", flush=True)
        continue
    for block in BLOCKS:
        if warp and block > dequant.WARP_VARIANTS[vname]:
            continue  # warp_occ's launch bounds
        set_config(variant, block, chunks, steps)
        cells = []
        for name, (qt, shape, raw, out) in inputs.items():
            cfg = dequant.config(qt)
            if not fits(qt):
                cells.append(f"{name}  smem")
                continue
            try:
                t = median(
                    gpu_times(
                        lambda i, a=(raw, qt, shape), o=out: dequant.launch_dequantize_f16(
                            *a, out=o
                        )
                    )
                )
            except cp.cuda.driver.CUDADriverError:
                cells.append(f"{name}   err")
                continue
            pct = 100 * (raw.nbytes + out.nbytes) / t / 1e9 / copy
            cells.append(f"{name} {pct:5.1f}%{'!' if name in bad else ''}")
            if name not in bad and pct > best.get(name, (0.0, None, 0))[0]:
                best[name] = (pct, cfg, steps)
        print(f"{tag:22s} block {block:3d}: " + "  ".join(cells), flush=True)
dequant.CONFIG.update(base)
dequant.WARP_STEPS = base_steps
cuda.module.cache_clear()
cuda.kernel.cache_clear()

print("best exact configuration per type (! = not exact, excluded):")
for name, (pct, cfg, steps) in best.items():
    warp = dequant.VARIANTS[cfg.variant] in dequant.WARP_VARIANTS
    extra = f" (WARP_STEPS {steps})" if warp else ""
    print(f"  {name:5s} {pct:5.1f}%  {dequant.VARIANTS[cfg.variant]:7s} {cfg}{extra}")
print("CONFIG = {")
for name, (_, cfg, _) in best.items():
    print(f"    _T.{name}: KernelConfig({cfg.variant}, {cfg.block}, {cfg.chunks}),")
print("}")
print(f"sweep took {time.perf_counter() - t_start:.0f} s")
