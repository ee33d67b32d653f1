"""MatMul: activations [nt, k] f32 times a weight [n, k] (GGUF's row-per-output layout)ᵀ.

The seed's two paths (§3.2, §4.1), chosen per run (``--matmul``) and named in every launch
record (``extra.path``) so the trace says which one ran:

- ``quant`` (the default on cupy): up to ``matvec.MAX_NT`` tokens the GGUF blocks read by mmvq
  with x quantized to 8 bits (or matvec for F32/F16/BF16 weights, ``kernels/matvec.py``); a
  larger batch (a prefill) takes the f16 GEMM below, per call or cached — the faster of the
  two prefill kernels on the H200 (BENCHMARKS.md, ``scripts/bench_mmq.py``: dequant + GEMM
  ran 512 tokens in 0.15-0.33x mmq's time), as llama.cpp also leaves large batches to cuBLAS.
- ``mmq``: ``quant``, with a larger batch of a block-quantized weight kept on the GGUF blocks
  too: quantize_q8 + mmq (int8 tensor-core MMA, ``kernels/mmq.py``). Float weights past
  MAX_NT have no quant kernel and take the f16 path (their records say so).
- ``f16``: the weight as f16 — from the persistent w16 cache (``f16-cached``, made at load) or
  dequantized by ``dequant_<suffix>_f16`` into a scratch buffer in the node itself
  (``f16-per-call``) —, the activations converted with ``convert_f32_f16`` and cuBLASLt's GEMM
  (f16 in, f32 accumulate and out).
- ``f32`` (NumPy only, its default): the exact f32 weight, made at load, times x in f32.

``--w16-cache auto|on|off``: ``auto`` is the seed's rule, on when the f16 path is chosen and the
matmul weights' GGUF bytes total >= 2 GiB (:func:`w16_cache_on`).
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracekit.kernels.checks import KernelInputError, require_array, require_contiguous
from tracekit.kernels.launch import LaunchRecord
from tracekit.quants import QuantType

#: ``--matmul`` values; ``None`` asks for the backend's default (cupy quant, numpy f32).
MATMUL_MODES = ("quant", "mmq", "f16", "f32")
W16_CACHE_MODES = ("auto", "on", "off")
#: The seed's W16_ENABLE_BYTES: ``--w16-cache auto`` caches from this many matmul GGUF bytes.
W16_CACHE_AUTO_BYTES = 2 << 30
#: The paths a matmul launch record names (``extra.path``).
PATHS = ("quant", "f16-per-call", "f16-cached", "f32")


@dataclass
class MatmulWeight:
    """A matmul weight as a backend keeps it: its GGUF bytes (``raw``, on the backend) and, when
    made at load, ``cached`` — the w16 cache's f16 copy, or NumPy's exact f32 one (``cached_as``
    ``"f16"`` or ``"f32"``)."""

    raw: Any
    quant: QuantType
    shape: tuple[int, int]
    cached: Any = None
    cached_as: str | None = None


def check_modes(matmul: str, w16_cache: str) -> None:
    if matmul not in MATMUL_MODES:
        raise ValueError(f"--matmul {matmul!r} is not one of {', '.join(MATMUL_MODES)}")
    if w16_cache not in W16_CACHE_MODES:
        raise ValueError(f"--w16-cache {w16_cache!r} is not one of {', '.join(W16_CACHE_MODES)}")


def w16_cache_on(matmul: str, w16_cache: str, matmul_bytes: int) -> bool:
    """Whether the model's matmul weights are dequantized to f16 once, at load (the w16 cache).

    ``on``/``off`` say so; ``auto`` is the seed's rule: the f16 path and >= 2 GiB of weights."""
    if w16_cache == "auto":
        return matmul == "f16" and matmul_bytes >= W16_CACHE_AUTO_BYTES
    return w16_cache == "on"


def choose_path(matmul: str, w: MatmulWeight, nt: int) -> str:
    """The path of one matmul call: both backends decide with this, so their traces agree."""
    from tracekit.kernels.matvec import MAX_NT

    if matmul == "f32":
        if w.cached_as != "f32":
            raise KernelInputError("the f32 matmul path needs the weight's f32 copy made at load")
        return "f32"
    # the quant path: mmvq/matvec up to MAX_NT tokens; past it mmq (block-quantized weights,
    # --matmul mmq), else the f16 GEMM
    if matmul in ("quant", "mmq") and nt <= MAX_NT:
        return "quant"
    if matmul == "mmq" and w.quant.is_quantized:
        return "quant"
    return "f16-cached" if w.cached_as == "f16" else "f16-per-call"


def with_path(recs: list[LaunchRecord], path: str) -> list[LaunchRecord]:
    """The node's launch records, each naming the path they ran on (``extra.path``)."""
    for r in recs:
        r.extra["path"] = path
    return recs


def _check_shapes(x: Any, w: Any, what_w: str) -> tuple[int, int, int]:
    """Returns (nt, n, k)."""
    if x.ndim != 2:
        raise KernelInputError(f"matmul x has shape {tuple(x.shape)}, expected 2-D [nt, k]")
    if w.ndim != 2:
        raise KernelInputError(f"matmul {what_w} has shape {tuple(w.shape)}, expected 2-D [n, k]")
    nt, k = (int(s) for s in x.shape)
    n, kw = (int(s) for s in w.shape)
    if k != kw:
        raise KernelInputError(
            f"matmul k mismatch: x {tuple(x.shape)} has k={k}, {what_w} {tuple(w.shape)} has k={kw}"
        )
    if nt < 1 or n < 1 or k < 1:
        raise KernelInputError(
            f"matmul shapes x {tuple(x.shape)}, {what_w} {tuple(w.shape)} are empty"
        )
    return nt, n, k


def ref_matmul(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, LaunchRecord]:
    """``x @ w.T`` in float32 (an f16 weight is upcast to f32 first).

    Args:
        x: [nt, k] float32.
        w: [n, k] float32 or float16.

    Returns:
        (out [nt, n] float32, record ``numpy_matmul_f32`` with flops 2*nt*n*k)

    Raises:
        KernelInputError: a dtype other than those, a non-contiguous input, or a k mismatch.
    """
    require_array(x, np.float32, "matmul x")
    if np.dtype(w.dtype) not in (np.dtype(np.float32), np.dtype(np.float16)):
        raise KernelInputError(
            f"matmul weight has dtype {np.dtype(w.dtype).name}, expected float32 or float16"
        )
    require_contiguous(w, "matmul weight")
    nt, n, k = _check_shapes(x, w, "weight")
    w32 = w if w.dtype == np.float32 else w.astype(np.float32)
    out = np.matmul(x, w32.T)
    rec = LaunchRecord.of(
        "numpy_matmul_f32",
        None,
        reads=[x, w],
        writes=[out],
        flops=2 * nt * n * k,
        math_path="f32_matmul",
    )
    return out, rec


# -- cuBLASLt ---------------------------------------------------------------------------------
#: cublasComputeType_t CUBLAS_COMPUTE_32F: f32 accumulation, tensor cores allowed for f16
#: inputs. cudaDataType: CUDA_R_16F = 2, CUDA_R_32F = 0. cublasOperation_t: N = 0, T = 1.
_CUBLAS_COMPUTE_32F = 68
_CUDA_R_16F = 2
_CUDA_R_32F = 0
_OP_N, _OP_T = 0, 1
#: cublasLtMatmulDescAttributes_t / cublasLtMatmulPreferenceAttributes_t values (cublasLt.h)
_DESC_TRANSA, _DESC_TRANSB = 3, 4
_PREF_MAX_WORKSPACE_BYTES = 1
#: workspace offered to cuBLASLt's algorithms (allocated once per process)
LT_WORKSPACE_BYTES = 32 << 20
_INT32_MAX = 2**31 - 1

#: Host scalars alpha = 1, beta = 0 (read by cuBLASLt at call time: pointer mode HOST).
_ONE = np.ones(1, dtype=np.float32)
_ZERO = np.zeros(1, dtype=np.float32)


class _HeuristicResult(ctypes.Structure):
    """cublasLtMatmulHeuristicResult_t: the algorithm (64 opaque bytes) and its needs."""

    _fields_ = [
        ("algo", ctypes.c_uint64 * 8),
        ("workspaceSize", ctypes.c_size_t),
        ("state", ctypes.c_int),
        ("wavesCount", ctypes.c_float),
        ("reserved", ctypes.c_int * 4),
    ]


def _check_lt(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} failed with cublasStatus_t {status}")


@functools.cache
def _liblt() -> Any:
    """libcublasLt as loaded in this process (cuBLAS, loaded by CuPy, links it)."""
    import cupy
    from cupy_backends.cuda.libs import cublas  # noqa: F401 (loads libcublas and libcublasLt)

    cupy.cuda.Device().cublas_handle  # noqa: B018 (makes sure the libraries are loaded)
    path = "libcublasLt.so"
    with open("/proc/self/maps") as f:
        for line in f:
            name = line.rsplit(" ", 1)[-1].strip()
            if "/libcublasLt.so" in name:
                path = name
                break
    lib = ctypes.CDLL(path)
    vp, i, u64, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_size_t
    pvp = ctypes.POINTER(vp)
    sig = {
        "cublasLtCreate": [pvp],
        "cublasLtMatmulDescCreate": [pvp, i, i],
        "cublasLtMatmulDescSetAttribute": [vp, i, vp, sz],
        "cublasLtMatrixLayoutCreate": [pvp, i, u64, u64, ctypes.c_int64],
        "cublasLtMatmulPreferenceCreate": [pvp],
        "cublasLtMatmulPreferenceSetAttribute": [vp, i, vp, sz],
        "cublasLtMatmulAlgoGetHeuristic": [
            vp, vp, vp, vp, vp, vp, vp, i, ctypes.POINTER(_HeuristicResult), ctypes.POINTER(i)
        ],
        "cublasLtMatmul": [vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, sz, vp],
    }  # fmt: skip
    for name, args in sig.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, i
    return lib


@functools.cache
def _lt_context(device: int) -> tuple[int, Any]:
    """(cuBLASLt handle, workspace) of a device, made once."""
    import cupy

    lib = _liblt()
    h = ctypes.c_void_p()
    _check_lt(lib.cublasLtCreate(ctypes.byref(h)), "cublasLtCreate")
    with cupy.cuda.Device(device):
        ws = cupy.empty(LT_WORKSPACE_BYTES, dtype=cupy.uint8)
    return int(h.value or 0), ws


@functools.cache
def _lt_plan(device: int, n: int, k: int, nt: int) -> tuple[Any, ...]:
    """The descriptors and the algorithm of out^T [n, nt] = w16 [k, n]^T · x16 [k, nt]
    (column-major, f16 in, f32 accumulate and out), chosen once per shape by cuBLASLt's
    heuristic, so every launch of a shape, replayed or not, runs the same algorithm."""
    lib = _liblt()
    handle, _ = _lt_context(device)
    desc = ctypes.c_void_p()
    _check_lt(
        lib.cublasLtMatmulDescCreate(ctypes.byref(desc), _CUBLAS_COMPUTE_32F, _CUDA_R_32F),
        "cublasLtMatmulDescCreate",
    )
    for attr, op in ((_DESC_TRANSA, _OP_T), (_DESC_TRANSB, _OP_N)):
        v = ctypes.c_int32(op)
        _check_lt(
            lib.cublasLtMatmulDescSetAttribute(desc, attr, ctypes.byref(v), 4),
            "cublasLtMatmulDescSetAttribute",
        )
    layouts = []
    for dtype, rows, cols, ld in (
        (_CUDA_R_16F, k, n, k),  # A: w16 as [k, n] column-major, used transposed
        (_CUDA_R_16F, k, nt, k),  # B: x16 as [k, nt]
        (_CUDA_R_32F, n, nt, n),  # C and D: out^T as [n, nt]
    ):
        lay = ctypes.c_void_p()
        _check_lt(
            lib.cublasLtMatrixLayoutCreate(ctypes.byref(lay), dtype, rows, cols, ld),
            "cublasLtMatrixLayoutCreate",
        )
        layouts.append(lay)
    pref = ctypes.c_void_p()
    _check_lt(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "PreferenceCreate")
    ws_bytes = ctypes.c_uint64(LT_WORKSPACE_BYTES)
    _check_lt(
        lib.cublasLtMatmulPreferenceSetAttribute(
            pref, _PREF_MAX_WORKSPACE_BYTES, ctypes.byref(ws_bytes), 8
        ),
        "PreferenceSetAttribute",
    )
    result, count = _HeuristicResult(), ctypes.c_int(0)
    a, b, c = layouts
    _check_lt(
        lib.cublasLtMatmulAlgoGetHeuristic(
            handle, desc, a, b, c, c, pref, 1, ctypes.byref(result), ctypes.byref(count)
        ),
        "cublasLtMatmulAlgoGetHeuristic",
    )
    if count.value < 1:
        raise RuntimeError(f"cuBLASLt has no algorithm for the f16 GEMM n={n} k={k} nt={nt}")
    return desc, a, b, c, pref, result


#: (device, n, k, nt) of every cuBLASLt plan run in this process (:attr:`_GemmCall.loaded`)
_PLANS_RUN: set[tuple[int, int, int, int]] = set()


class _GemmCall:
    """One cuBLASLt matmul with its arguments bound and converted once: called at launch, and
    bound to a stream by a replayed :class:`~tracekit.kernels.cuda.LaunchTape` (``keep`` holds
    the arrays it points into). cuBLASLt through ctypes, not CuPy: CuPy's wrappers refuse to
    run while a stream is being captured, and a replay captures the step as a CUDA graph."""

    __slots__ = ("args", "keep", "plan_key")

    def __init__(self, x16: Any, w16: Any, out: Any) -> None:
        import cupy

        nt, k = (int(s) for s in x16.shape)
        n = int(w16.shape[0])
        dev = cupy.cuda.Device().id
        handle, ws = _lt_context(dev)
        self.plan_key = (dev, n, k, nt)
        desc, a, b, c, _pref, result = _lt_plan(*self.plan_key)
        vp = ctypes.c_void_p
        self.args = (
            vp(handle), desc, vp(_ONE.ctypes.data), vp(w16.data.ptr), a, vp(x16.data.ptr), b,
            vp(_ZERO.ctypes.data), vp(out.data.ptr), c, vp(out.data.ptr), c,
            vp(ctypes.addressof(result.algo)), vp(ws.data.ptr),
            ctypes.c_size_t(LT_WORKSPACE_BYTES),
        )  # fmt: skip
        self.keep = (x16, w16, out, ws, result)

    def __call__(self, stream_ptr: int) -> None:
        _check_lt(_liblt().cublasLtMatmul(*self.args, ctypes.c_void_p(stream_ptr)), "Matmul")
        _PLANS_RUN.add(self.plan_key)

    @property
    def loaded(self) -> bool:
        """Whether this GEMM's plan has run in this process, so its kernels are loaded. The
        first run of a plan may load them (CUDA's lazy module loading, the default since
        CUDA 12.2), and a load may wait for the whole context: a stream held on a host flag
        that the host writes only after this call would never let it return. So a stream-mode
        gate (runner/stamps.py) holds only a loaded call."""
        return self.plan_key in _PLANS_RUN

    def bind(self, stream_ptr: int) -> Any:
        """A zero-argument call of this GEMM on ``stream_ptr`` (for a replay's hot loop)."""
        return functools.partial(self, stream_ptr)


def gemm_f16_f32(x16: Any, w16: Any, out: Any) -> LaunchRecord:
    """out [nt, n] f32 = x16 [nt, k] f16 @ w16 [n, k]ᵀ f16 with f32 accumulation (cuBLASLt).

    cuBLAS is column-major: a row-major [r, c] array is a column-major [c, r] one, so the
    row-major product out = x w^T is computed as the column-major out^T [n, nt] = w16 · x16^T:
    A = w16 seen as [k, n] with op T, B = x16 seen as [k, nt] with op N, ldc = n. The algorithm
    is cuBLASLt's heuristic choice for the shape, made once (:func:`_lt_plan`).
    Arguments are not checked here (see :func:`launch_matmul_f16w`).
    """
    from tracekit.kernels import cuda

    nt, k = (int(s) for s in x16.shape)
    n = int(w16.shape[0])
    cuda.host_launch(_GemmCall(x16, w16, out))  # timed in a timed pass, taped when taping
    # cuBLASLt picks its own grid and block: the record carries none.
    return LaunchRecord.of(
        "cublaslt_matmul_f16_f32", None, reads=[x16, w16], writes=[out], flops=2 * nt * n * k,
        math_path="f16_tensor_core",  # the peak it is judged against (ceilings.py)
    )  # fmt: skip


def launch_matmul_f16w(x: Any, w16: Any, out: Any = None) -> tuple[Any, list[LaunchRecord]]:
    """x [nt, k] f32 @ w16 [n, k]ᵀ f16 -> [nt, n] f32 on the device (the seed's f16 path).

    Two launches: ``convert_f32_f16`` of x, then the cuBLAS GEMM (f16 in, f32 accumulate, f32
    out).

    Returns:
        (out, [convert record, GEMM record])

    Raises:
        KernelInputError: x not float32 or w16 not float16, non-contiguous, not 2-D, a k
            mismatch, a dimension over 2^31 - 1, host arrays, or a bad ``out``.
    """
    from tracekit.kernels.elementwise import device_out, launch_convert_f32_f16, require_device

    require_array(x, np.float32, "matmul x")
    require_array(w16, np.float16, "matmul f16 weight")
    nt, n, k = _check_shapes(x, w16, "f16 weight")
    if max(nt, n, k) > _INT32_MAX:
        raise KernelInputError(f"matmul dims nt={nt}, n={n}, k={k} exceed cuBLAS's int32 limit")
    require_device(x, "matmul x")
    require_device(w16, "matmul f16 weight")
    o = device_out(out, (nt, n), np.float32, "matmul out")
    x16, rec_convert = launch_convert_f32_f16(x)
    rec_gemm = gemm_f16_f32(x16, w16, o)
    return o, [rec_convert, rec_gemm]


def launch_matmul_dequant_f16(
    x: Any, raw: Any, qt: QuantType, shape: tuple[int, int]
) -> tuple[Any, list[LaunchRecord]]:
    """The f16 path without the w16 cache (the seed's per-call ``w16_get``): x [nt, k] f32 @
    W [n, k]ᵀ with W dequantized by ``dequant_<suffix>_f16`` into a scratch buffer in the call.

    Three launches: ``convert_f32_f16`` of x (first, so it can carry a replayed graph's node
    stamp), the dequant, the GEMM. The scratch buffer lives as long as the returned records'
    launches can be replayed (a tape keeps its arguments).

    Returns:
        (out, [convert record, dequant record, GEMM record])
    """
    from tracekit.kernels.dequant import launch_dequantize_f16
    from tracekit.kernels.elementwise import launch_convert_f32_f16, require_device

    require_array(x, np.float32, "matmul x")
    nt, k = (int(s) for s in x.shape) if x.ndim == 2 else (0, 0)
    n = int(shape[0])
    if x.ndim != 2 or k != int(shape[1]):
        raise KernelInputError(f"matmul x has shape {tuple(x.shape)}, expected [nt, {shape[1]}]")
    if max(nt, n, k) > _INT32_MAX:
        raise KernelInputError(f"matmul dims nt={nt}, n={n}, k={k} exceed cuBLAS's int32 limit")
    require_device(x, "matmul x")
    x16, rec_convert = launch_convert_f32_f16(x)
    w16, rec_dequant = launch_dequantize_f16(raw, qt, shape)
    import cupy

    out = cupy.empty((nt, n), dtype=cupy.float32)
    rec_gemm = gemm_f16_f32(x16, w16, out)
    return out, [rec_convert, rec_dequant, rec_gemm]
