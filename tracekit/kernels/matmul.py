"""MatMul: activations [nt, k] f32 times a weight [n, k] (GGUF's row-per-output layout)ᵀ.

The GPU path is the seed's f16 path: the weight is dequantized to f16 once at load (the w16
cache, see ``Backend.matmul_weight``), the activations are converted with ``convert_f32_f16``
and cuBLAS runs the GEMM with f16 inputs, f32 accumulation and f32 output. The NumPy path runs
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
        "numpy_matmul_f32", None, reads=[x, w], writes=[out], flops=2 * nt * n * k
    )
    return out, rec


# -- cuBLAS -----------------------------------------------------------------------------------
#: cublasComputeType_t CUBLAS_COMPUTE_32F (CUDA >= 11): f32 accumulation, tensor cores allowed
#: for f16 inputs. cudaDataType: CUDA_R_16F = 2, CUDA_R_32F = 0.
_CUBLAS_COMPUTE_32F = 68
_CUDA_R_16F = 2
_CUDA_R_32F = 0
_CUBLAS_GEMM_DEFAULT = -1
_INT32_MAX = 2**31 - 1


#: Host scalars alpha = 1, beta = 0 (read by cuBLAS at call time: pointer mode HOST).
_ONE = np.ones(1, dtype=np.float32)
_ZERO = np.zeros(1, dtype=np.float32)


class _GemmCall:
    """One cuBLAS gemmEx with its arguments bound: called at launch, and again by a replayed
    :class:`~tracekit.kernels.cuda.LaunchTape` (``keep`` holds the arrays it points into).

    The call goes to libcublas through ctypes, on the handle CuPy made: CuPy's own wrappers
    refuse to run while a stream is being captured, and a replay captures the step as a CUDA
    graph."""

    __slots__ = ("handle", "args", "keep", "_c_args")

    def __init__(self, handle: int, args: tuple[Any, ...], keep: tuple[Any, ...]) -> None:
        self.handle, self.args, self.keep = handle, args, keep
        self._c_args: tuple[Any, ...] | None = None

    def gemm_only(self) -> None:
        """The GEMM alone, its arguments converted once: for a replay that has set the
        handle's stream and pointer mode for the whole step (:func:`gemm_step_setup`)."""
        if self._c_args is None:
            types = _libcublas().cublasGemmEx.argtypes
            self._c_args = tuple(
                t(a) for t, a in zip(types, (self.handle, *self.args), strict=True)
            )
        _check_cublas(_libcublas().cublasGemmEx(*self._c_args), "cublasGemmEx")

    def __call__(self, stream_ptr: int) -> None:
        lib = _libcublas()
        h = self.handle
        _check_cublas(lib.cublasSetStream_v2(h, stream_ptr), "cublasSetStream")
        mode = ctypes.c_int()
        _check_cublas(lib.cublasGetPointerMode_v2(h, ctypes.byref(mode)), "cublasGetPointerMode")
        _check_cublas(
            lib.cublasSetPointerMode_v2(h, _CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode"
        )
        try:
            _check_cublas(lib.cublasGemmEx(h, *self.args), "cublasGemmEx")
        finally:
            lib.cublasSetPointerMode_v2(h, mode.value)


_CUBLAS_POINTER_MODE_HOST = 0


def gemm_step_setup(handle: int, stream_ptr: int) -> int:
    """Point ``handle`` at ``stream_ptr`` in host pointer mode for a replayed step's GEMMs;
    returns the previous pointer mode (give it to :func:`gemm_step_restore`)."""
    lib = _libcublas()
    _check_cublas(lib.cublasSetStream_v2(handle, stream_ptr), "cublasSetStream")
    mode = ctypes.c_int()
    _check_cublas(lib.cublasGetPointerMode_v2(handle, ctypes.byref(mode)), "cublasGetPointerMode")
    _check_cublas(
        lib.cublasSetPointerMode_v2(handle, _CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode"
    )
    return mode.value


def gemm_step_restore(handle: int, mode: int) -> None:
    _libcublas().cublasSetPointerMode_v2(handle, mode)


def _check_cublas(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} failed with cublasStatus_t {status}")


@functools.cache
def _libcublas() -> Any:
    """The libcublas CuPy loaded (found in this process's maps, so the handle is valid in it)."""
    path = "libcublas.so"
    with open("/proc/self/maps") as f:
        for line in f:
            name = line.rsplit(" ", 1)[-1].strip()
            if "/libcublas.so" in name:
                path = name
                break
    lib = ctypes.CDLL(path)
    vp, i = ctypes.c_void_p, ctypes.c_int
    lib.cublasSetStream_v2.argtypes = [vp, vp]
    lib.cublasGetPointerMode_v2.argtypes = [vp, ctypes.POINTER(i)]
    lib.cublasSetPointerMode_v2.argtypes = [vp, i]
    lib.cublasGemmEx.argtypes = [vp, i, i, i, i, i, vp, vp, i, i, vp, i, i, vp, vp, i, i, i, i]
    for fn in ("cublasSetStream_v2", "cublasGetPointerMode_v2", "cublasSetPointerMode_v2",
               "cublasGemmEx"):  # fmt: skip
        getattr(lib, fn).restype = i
    return lib


def gemm_f16_f32(x16: Any, w16: Any, out: Any) -> LaunchRecord:
    """out [nt, n] f32 = x16 [nt, k] f16 @ w16 [n, k]ᵀ f16 with f32 accumulation (cuBLAS gemmEx).

    cuBLAS is column-major: a row-major [r, c] array is a column-major [c, r] one, so the
    row-major product out = x w^T is computed as the column-major out^T [n, nt] = w16 · x16^T:
    A = w16 seen as [k, n] with op T, B = x16 seen as [k, nt] with op N, ldc = n.
    Arguments are not checked here (see :func:`launch_matmul_f16w`).
    """
    import cupy
    from cupy.cuda import device
    from cupy_backends.cuda.libs import cublas

    from tracekit.kernels import cuda

    nt, k = (int(s) for s in x16.shape)
    n = int(w16.shape[0])
    handle = device.get_cublas_handle()
    args = (
        cublas.CUBLAS_OP_T,
        cublas.CUBLAS_OP_N,
        n,
        nt,
        k,
        _ONE.ctypes.data,
        w16.data.ptr,
        _CUDA_R_16F,
        k,
        x16.data.ptr,
        _CUDA_R_16F,
        k,
        _ZERO.ctypes.data,
        out.data.ptr,
        _CUDA_R_32F,
        n,
        getattr(cublas, "CUBLAS_COMPUTE_32F", _CUBLAS_COMPUTE_32F),
        getattr(cublas, "CUBLAS_GEMM_DEFAULT", _CUBLAS_GEMM_DEFAULT),
    )
    call = _GemmCall(handle, args, (x16, w16, out))
    call(cupy.cuda.get_current_stream().ptr)
    cuda.record_host_call(call)
    # cuBLAS picks its own grid and block: the record carries none.
    return LaunchRecord.of(
        "cublas_gemmex_f16_f32", None, reads=[x16, w16], writes=[out], flops=2 * nt * n * k
    )


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
