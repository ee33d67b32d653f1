"""MatMul: activations [nt, k] f32 times a weight [n, k] (GGUF's row-per-output layout)ᵀ.

The GPU path is the seed's f16 path: the weight is dequantized to f16 once at load (the w16
cache, see ``Backend.matmul_weight``), the activations are converted with ``convert_f32_f16``
and cuBLASLt runs the GEMM with f16 inputs, f32 accumulation and f32 output. The NumPy path runs
the same product in f32 on the exact dequantized weight.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import numpy as np

from tracekit.kernels.checks import KernelInputError, require_array, require_contiguous
from tracekit.kernels.launch import LaunchRecord


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


class _GemmCall:
    """One cuBLASLt matmul with its arguments bound and converted once: called at launch, and
    bound to a stream by a replayed :class:`~tracekit.kernels.cuda.LaunchTape` (``keep`` holds
    the arrays it points into). cuBLASLt through ctypes, not CuPy: CuPy's wrappers refuse to
    run while a stream is being captured, and a replay captures the step as a CUDA graph."""

    __slots__ = ("args", "keep")

    def __init__(self, x16: Any, w16: Any, out: Any) -> None:
        import cupy

        nt, k = (int(s) for s in x16.shape)
        n = int(w16.shape[0])
        dev = cupy.cuda.Device().id
        handle, ws = _lt_context(dev)
        desc, a, b, c, _pref, result = _lt_plan(dev, n, k, nt)
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
    import cupy

    from tracekit.kernels import cuda

    nt, k = (int(s) for s in x16.shape)
    n = int(w16.shape[0])
    call = _GemmCall(x16, w16, out)
    call(cupy.cuda.get_current_stream().ptr)
    cuda.record_host_call(call)
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
