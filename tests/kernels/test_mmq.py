"""mmq's reference, gates and geometry on the CPU (its GPU tests: test_mmq_gpu.py)."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from tests.kernels.test_matvec import gamma, oracle, q8_oracle, random_x, weight
from tracekit import quants
from tracekit.kernels import cuda, matvec, mmq
from tracekit.kernels.backend import get_backend
from tracekit.kernels.checks import KernelInputError
from tracekit.quants import QUANTIZED_TYPES, QuantType, quant_type

IDS = [t.name for t in QUANTIZED_TYPES]


@pytest.mark.parametrize("qt", QUANTIZED_TYPES, ids=IDS)
@pytest.mark.parametrize("n, nt", [(1, 9), (7, 65), (33, 130)])
def test_ref_mmq_is_the_q8_product_of_the_gguf_values(qt: QuantType, n: int, nt: int) -> None:
    k = 3 * qt.block_size if qt.block_size > 32 else 352
    raw, w64 = weight(qt, n, k, seed=n)
    x = random_x(nt, k, seed=nt)
    got, (qrec, rec), mag = mmq.ref_mmq(x, raw, qt, (n, k), bound=True)
    assert got.dtype == np.float32 and got.shape == (nt, n)
    want, scale = q8_oracle(x, w64)
    assert np.all(np.abs(got - want) <= gamma(k // 16 + 3) * scale)
    assert np.all(mag <= scale * (1 + 1e-5))
    exact, _ = oracle(x, w64)  # and the 8-bit activations are a small step from the exact x
    _, d, _ = matvec.quantize_q8(x)
    half = np.repeat(d.astype(np.float64), 32, axis=1) / 2
    assert np.all(np.abs(got - exact) <= half @ np.abs(w64).T * 1.001 + gamma(k) * scale)
    # the records of the GPU's two launches, with the GPU's bytes
    assert (qrec.kernel, rec.kernel) == ("numpy_quantize_q8", f"numpy_mmq_{qt.suffix}")
    assert {qrec.extra["path"], rec.extra["path"]} == {"quant"}
    assert rec.extra["math_path"] == mmq.MATH_MMQ == "int8_tensor_core"
    runs = nt * (k // 32) * matvec.RUN_BYTES  # the runs, not their buffer's gaps
    assert qrec.bytes_written == runs and rec.bytes_read == raw.nbytes + runs
    assert rec.flops == 2 * nt * n * k


@pytest.mark.parametrize("qt", QUANTIZED_TYPES, ids=IDS)
def test_a_prefill_is_its_tokens_decoded_one_by_one(qt: QuantType) -> None:
    """The batched reference (token chunks, one matmul per scale group) computes every token's
    row exactly as mmvq's reference computes that token alone: bit for bit."""
    n, k, nt = 9, 2 * max(256, qt.block_size), 20
    raw, _ = weight(qt, n, k, seed=4)
    x = random_x(nt, k, seed=6)
    x[4, 17] = np.nan
    got, _ = mmq.ref_mmq(x, raw, qt, (n, k))
    for t in range(nt):
        one, _ = matvec.ref_mmvq(x[t : t + 1], raw, qt, (n, k))
        np.testing.assert_array_equal(got[t], one[0], err_msg=f"token {t}")
    assert np.isnan(got[4]).all() and np.isfinite(np.delete(got, 4, axis=0)).all()


def test_the_token_chunks_of_a_large_prefill_agree(monkeypatch) -> None:
    """q8_product splits tokens into chunks of ~16 MB of sums: a split mid-batch changes no bit."""
    qt = quant_type("Q6_K")
    n, k, nt = 5, 512, 37
    raw, _ = weight(qt, n, k, seed=2)
    x = random_x(nt, k, seed=8)
    whole, _ = matvec.q8_product(x, raw, qt, (n, k))
    # 2^22 / (rows x groups) tokens per chunk: 5 rows x 32 groups -> all 37 at once; 8192 rows
    # (a row chunk at k = 512) x 32 groups -> 16 tokens, so 37 tokens go in three chunks
    big_n = 8192
    raw_big, _ = weight(qt, big_n, k, seed=2)
    raw_big[: raw.size] = raw  # the first n rows are the same weight
    split, _ = matvec.q8_product(x, raw_big, qt, (big_n, k))
    np.testing.assert_array_equal(split[:, :n], whole)


def test_ref_mmq_gates() -> None:
    qt = quant_type("Q4_0")
    raw, _ = weight(qt, 4, 64)
    with pytest.raises(KernelInputError, match="block-quantized"):
        mmq.ref_mmq(random_x(9, 64), np.zeros(4 * 64 * 2, np.uint8), quant_type("F16"), (4, 64))
    with pytest.raises(KernelInputError, match="k mismatch"):
        mmq.ref_mmq(random_x(9, 96), raw, qt, (4, 64))
    with pytest.raises(KernelInputError, match="1..8 tokens"):  # mmvq still takes <= MAX_NT
        matvec.ref_mmvq(random_x(matvec.MAX_NT + 1, 64), raw, qt, (4, 64))


def test_runs_mmq_past_max_nt_for_block_quantized_weights() -> None:
    assert not mmq.runs_mmq(quant_type("Q4_K"), matvec.MAX_NT)
    assert mmq.runs_mmq(quant_type("Q4_K"), matvec.MAX_NT + 1)
    assert not mmq.runs_mmq(quant_type("F16"), 512)


def test_geometry_covers_every_row_and_token() -> None:
    g = mmq.geometry(200, 130)
    assert g.grid == (3, 4, 1) and g.block == (mmq.THREADS, 1, 1) == (128, 1, 1)
    for n, nt in [(1, 9), (63, 64), (64, 65), (65, 130), (151936, 512)]:
        g = mmq.geometry(n, nt)
        assert g.grid[0] * mmq.BN >= nt > (g.grid[0] - 1) * mmq.BN
        assert g.grid[1] * mmq.BM >= n > (g.grid[1] - 1) * mmq.BM
    with pytest.raises(KernelInputError, match="grid.y"):
        mmq.geometry(65536 * mmq.BM, 9)
    q = mmq.quantize_geometry(130, 4096)
    assert q.block == (256, 1, 1) and q.grid[0] * 256 >= 130 * 128


@pytest.mark.parametrize("qt", QUANTIZED_TYPES, ids=IDS)
def test_shared_bytes_fit_the_h200(qt: QuantType) -> None:
    # four resident blocks of 128 threads per SM fit the H200's 228 KB (227 KB per block)
    assert 40_000 < mmq.shared_bytes(qt) <= 228 * 1024 // 4


def test_mmq_kernels_are_stamped() -> None:
    names = mmq.kernel_names()
    assert names == {f"mmq_{t.suffix}" for t in QUANTIZED_TYPES} | {"quantize_q8"}
    assert names <= cuda.STAMPED


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_kernel_layout_is_the_launchers(tmp_path) -> None:
    """mmq.cu's MmqLayout (the kernel traps on less dynamic shared memory) is shared_bytes, for
    every type: compiled with the launcher's own -D options (static_asserts, no GPU needed)."""
    src = (cuda._HERE / "mmq.cu").read_text()
    for t in QUANTIZED_TYPES:
        src += f"\nMMQ_KERNELS({t.suffix}, {t.device})\n"
        src += (
            f"static_assert(4 * MmqLayout<Codes<{t.device}>>::WORDS == {mmq.shared_bytes(t)}, "
            f'"{t.name}");\n'
        )
    (tmp_path / "mmq_layout.cu").write_text(src)
    cmd = ["nvcc", "-arch=sm_90", "-cubin", "-std=c++17", f"-I{cuda._HERE}"]
    cmd += [*quants.cuda_defines(), *mmq.defines(), "-o", str(tmp_path / "m.cubin")]
    r = subprocess.run([*cmd, str(tmp_path / "mmq_layout.cu")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


def test_numpy_backend_prefill_on_the_mmq_path_is_mmq() -> None:
    """A 130-token matmul on the NumPy backend's mmq path: quantize_q8 + mmq's records, the q8
    product's values; a float weight past MAX_NT takes the f16 path and its records say so."""
    be = get_backend("numpy", "mmq")
    qt = quant_type("Q5_K")
    n, k = 6, 512
    raw, _ = weight(qt, n, k, tame=True)
    w = be.matmul_weight(raw, qt, (n, k), be.w16_cache_on(1))
    be.take_records()
    x = random_x(130, k)
    got = be.matmul(x, w)
    recs = be.take_records()
    assert [r.kernel for r in recs] == ["numpy_quantize_q8", "numpy_mmq_q5_k"]
    np.testing.assert_array_equal(got, matvec.q8_product(x, raw, qt, (n, k))[0])
    f16 = quant_type("F16")
    w16 = be.matmul_weight(
        np.random.default_rng(0).standard_normal((n, k)).astype(np.float16).view(np.uint8),
        f16, (n, k), False,
    )  # fmt: skip
    be.take_records()
    be.matmul(x, w16)
    assert {r.extra["path"] for r in be.take_records()} == {"f16-per-call"}
