"""mmvq_st's and mmvq's prologue knobs on the GPU (matvec.cu: MMVQ_X_LANES, x quantized 8 lanes a
run; MMVQ_ST_X_FIRST, x's loads before the first copies; MMVQ_ST_FILLS_AT_ARRIVAL, the later first
fills once the first tile is in) and its loop's (MMVQ_ST_XREG=V, V values of x held in
registers a lane for every type: the engine holds 128 for the types that declare it,
quants.MmvqConfig.staged_x_held; MMVQ_PAIRED_BLOCKS, lanes on pairs of blocks;
MMVQ_ROWS_REDUCE, a warp's rows summed in one butterfly; and quant_codes.cuh's
MMVQ_Q5_0_WINDOW), which are not the engine's build:
built with them in a subprocess (its own TRACEKIT_CUDA_DEFINES and cache), the staged and the
fused kernel at edge shapes, one and three tokens, against ref_mmvq's bound, on poisoned
outputs. scripts/gpu_check_s6.sh's xprologue and knobs stages time them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHECK = """
import cupy as cp, numpy as np
from tests.kernels.test_matvec import gamma, random_x, weight
from tracekit.kernels import matvec
from tracekit.quants import quant_type
for name in ("Q4_0", "IQ4_NL", "Q4_K", "Q2_K", "Q6_K", "Q5_0", "Q8_0"):
    qt = quant_type(name)
    for n, k in ((4100, 4096), (37, 768)):
        raw, _ = weight(qt, n, k, seed=n, tame=True)
        for nt in (1, 3):
            x = random_x(nt, k, seed=nt)
            want, _, mag = matvec.ref_mmvq(x, raw, qt, (n, k), bound=True)
            for staged, rpw in ((True, 1), (True, 2), (False, None)):  # (mmvq_st's rows a warp)
                out = cp.full((nt, n), cp.nan, cp.float32)
                matvec.launch_matvec(cp.asarray(x), cp.asarray(raw), qt, (n, k), out, staged=staged,
                                     rows_per_warp=rpw, rows_per_block=8 // rpw if rpw else None)
                got = cp.asnumpy(out)
                bad = ~(np.abs(got - want) <= gamma(k // 16 + 40) * mag)
                assert not bad.any(), (name, n, k, nt, staged, rpw, int(bad.sum()))
print("ok")
"""


@pytest.mark.gpu
@pytest.mark.parametrize("defines", ["-DMMVQ_X_LANES=1", "-DMMVQ_X_LANES=1 -DMMVQ_ST_X_FIRST=1",
                                     "-DMMVQ_ST_X_FIRST=1",
                                     "-DMMVQ_ST_EARLY_FILLS=1 -DMMVQ_ST_FILLS_AT_ARRIVAL=1",
                                     "-DMMVQ_ST_X_FIRST=1 -DMMVQ_ST_EARLY_FILLS=1 -DMMVQ_ST_FILLS_AT_ARRIVAL=1",
                                     "-DMMVQ_ST_XREG=0",
                                     "-DMMVQ_ST_XREG=128",
                                     "-DMMVQ_PAIRED_BLOCKS=1", "-DMMVQ_Q5_0_WINDOW=1",
                                     "-DMMVQ_ROWS_REDUCE=1"])  # fmt: skip
def test_the_prologue_knobs_give_the_reference(tmp_path, defines: str) -> None:
    pytest.importorskip("cupy")
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path, TRACEKIT_CACHE=str(tmp_path),
               TRACEKIT_CUDA_DEFINES=defines)  # fmt: skip
    got = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=600)  # fmt: skip
    assert got.returncode == 0, got.stderr[-3000:]
    assert got.stdout.strip().endswith("ok")
