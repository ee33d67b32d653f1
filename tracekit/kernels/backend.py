"""Hop 2 of the dispatch chain: the backend method.

    runner/ (graph op)  ->  backend method  ->  launcher (grid contract)  ->  kernel

Two implementations of one interface. The interface is the op declarations
(``tracekit/kernels/registry.py``, one per op at the end of its family module): a method per
declared op, with the reference's arguments, runs the op's :meth:`Backend.impl` here,
``CupyBackend`` the launcher (``tracekit/kernels/<family>.py``, which loads ``<family>.cu``),
``NumpyBackend`` the NumPy reference beside it. A new op is one declaration, one kernel and one
reference; no backend method is written for it. The matmul is the one routed method (it picks a
path per call). Both backends append one :class:`LaunchRecord` per launch to ``self.records``;
the runner takes them after each node. A backend is chosen once per run (``auto``: cupy when a
GPU is usable, else numpy) and never falls back mid-run.
"""

from __future__ import annotations

import inspect
import time
from typing import Any

import numpy as np

from tracekit.kernels import (
    attention,
    dequant,
    elementwise,
    embed,
    matmul,
    matvec,
    mmq,
    norm,
    reduce,
    rope,
)
from tracekit.kernels.checks import KernelInputError
from tracekit.kernels.cuda import is_device_array, pinned_array
from tracekit.kernels.launch import LaunchRecord
from tracekit.kernels.matmul import MatmulWeight
from tracekit.kernels.registry import KERNEL_OPS, Impl, KernelOp
from tracekit.quants import QuantType, quant_type

#: The kernel families; importing them declares their ops (tracekit/kernels/registry.py).
FAMILIES = (attention, dequant, elementwise, embed, matmul, matvec, norm, reduce, rope)
#: Backend methods that are not one declared op, by family: the matmul picks its path, and so
#: its kernels, per call (``matmul.choose_path``); each backend routes it in ``_matmul_on``.
ROUTED = {"matmul": "matmul"}

BACKEND_NAMES = ("auto", "cupy", "numpy")


class BackendUnavailable(RuntimeError):
    """The requested backend cannot run here (e.g. ``cupy`` without a usable GPU)."""


def cupy_usable() -> tuple[bool, str]:
    """Whether CuPy imports and sees a CUDA device that can allocate; and why not."""
    try:
        import cupy
    except Exception as e:  # ImportError, or a CUDA library that fails to load
        return False, f"cupy is not importable ({type(e).__name__}: {e})"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return False, "no CUDA device"
        cupy.zeros(1, dtype=cupy.float32).sum().item()
    except Exception as e:
        return False, f"no usable CUDA device ({type(e).__name__}: {e})"
    return True, "ok"


def get_backend(name: str = "auto", matmul: str | None = None, w16_cache: str = "auto") -> Backend:
    """Return a backend by name: ``"numpy"``, ``"cupy"`` or ``"auto"``.

    ``matmul``/``w16_cache``: the run's matmul path and w16 cache (``kernels/matmul.py``);
    ``matmul=None`` is the backend's default (cupy ``quant``, numpy ``f32``).

    Raises:
        ValueError: an unknown name or mode, or ``f32`` asked of the cupy backend.
        BackendUnavailable: ``"cupy"`` was asked for and no GPU is usable (no silent fallback).
    """
    if isinstance(name, Backend):
        return name
    if name not in BACKEND_NAMES:
        raise ValueError(f"backend {name!r} is not one of {', '.join(BACKEND_NAMES)}")
    if name == "numpy":
        return NumpyBackend(matmul, w16_cache)
    ok, why = cupy_usable()
    if name == "cupy":
        if not ok:
            raise BackendUnavailable(f"backend 'cupy' is not usable here: {why}")
        return CupyBackend(matmul, w16_cache)
    return CupyBackend(matmul, w16_cache) if ok else NumpyBackend(matmul, w16_cache)


class Backend:
    """The interface both backends implement; see the family modules for each op's contract."""

    name: str = "?"
    xp: Any = np
    #: the matmul path when none is asked for
    default_matmul: str = "f16"

    def __init__(self, matmul_mode: str | None = None, w16_cache: str = "auto") -> None:
        self.records: list[LaunchRecord] = []
        self.matmul_mode = matmul_mode or self.default_matmul
        self.w16_cache = w16_cache
        matmul.check_modes(self.matmul_mode, w16_cache)

    # -- bookkeeping ------------------------------------------------------------------------
    def _emit(self, result: tuple[Any, LaunchRecord | list[LaunchRecord]]) -> Any:
        out, recs = result
        if isinstance(recs, LaunchRecord):
            self.records.append(recs)
        else:
            self.records.extend(recs)
        return out

    def take_records(self) -> list[LaunchRecord]:
        recs, self.records = self.records, []
        return recs

    # -- memory -----------------------------------------------------------------------------
    def asarray(self, a: Any, dtype: Any = None) -> Any:
        raise NotImplementedError

    def to_host(self, a: Any) -> np.ndarray:
        raise NotImplementedError

    def synchronize(self) -> None:
        pass

    def device_name(self) -> str:
        raise NotImplementedError

    def now(self) -> float:
        """A host clock in seconds, for wall times (after ``synchronize``)."""
        return time.perf_counter()

    # -- ops ---------------------------------------------------------------------------------
    # One method per declared backend op (tracekit/kernels/registry.py), made below by
    # _op_method: it runs the op's ``impl`` here and keeps its launch records. Each returns
    # the op's output; the records go to self.records.
    def impl(self, op: KernelOp) -> Impl:
        """What runs ``op`` on this backend: its NumPy reference or its launcher."""
        raise NotImplementedError

    def run(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Run the declared backend op ``name`` with the reference's arguments; returns its
        output and keeps its launch records (``be.run("add_f32", x, y)`` is ``be.add_f32(x, y)``).

        Raises:
            KeyError: no backend op of that name is declared.
        """
        return self._emit(self.impl(KERNEL_OPS[name])(*args, **kwargs))

    def w16_cache_on(self, matmul_bytes: int) -> bool:
        """Whether :meth:`matmul_weight` makes the w16 cache (``matmul.w16_cache_on``'s rule)."""
        return matmul.w16_cache_on(self.matmul_mode, self.w16_cache, matmul_bytes)

    def matmul_weight(
        self, raw: Any, qtype: QuantType, shape: tuple[int, int], cache: bool = False
    ) -> MatmulWeight:
        """A matmul weight as this backend keeps it, made once at load and cached by the model:
        the packed bytes, plus the w16 cache's f16 copy when ``cache`` (one ``dequant_*_f16``
        launch, recorded) or, on the f32 path, the exact f32 values gguf-py dequantizes to."""
        qt, shape = quant_type(qtype), (int(shape[0]), int(shape[1]))
        if self.matmul_mode == "f32":
            w32 = self._emit(self._dequantize_f32(raw, qt, shape))
            self.records[-1].extra["path"] = "f32"
            return MatmulWeight(None, qt, shape, w32, "f32")
        if cache:
            w16 = self.dequantize_f16(raw, qt, shape)
            self.records[-1].extra["path"] = "f16-cached"
            # the f16 path never reads the packed bytes again; the quant path's decode does
            return MatmulWeight(raw if self.matmul_mode == "quant" else None, qt, shape, w16, "f16")
        return MatmulWeight(raw, qt, shape)

    def warm_dequant(self, qt: QuantType) -> None:
        """Load ``dequant_<suffix>_f16`` before a timed launch of it (compiling is not its
        time); nothing to load on NumPy."""

    def _dequantize_f32(self, raw: Any, qt: QuantType, shape: tuple[int, int]) -> Any:
        raise KernelInputError(f"the f32 matmul path runs on the numpy backend, not {self.name}")

    def matmul(self, x: Any, w: MatmulWeight, bias: Any = None) -> Any:
        """x [nt, k] f32 times w [n, k]ᵀ (from :meth:`matmul_weight`) (+ ``bias`` f32 [n]) ->
        [nt, n] f32, on the path ``matmul.choose_path`` picks; every launch record names that
        path. The bias is added in mmvq's / matvec's epilogue (one launch), after a GEMM by
        ``add_bias_f32`` (the node's last launch)."""
        if not isinstance(w, MatmulWeight):
            raise KernelInputError(
                f"matmul weight is a {type(w).__name__}, expected a MatmulWeight (matmul_weight)"
            )
        matvec.check_bias(bias, w.shape[0])
        nt = int(x.shape[0]) if x.ndim else 0
        path = matmul.choose_path(self.matmul_mode, w, nt)
        epilogue = path == "quant" and not mmq.runs_mmq(w.quant, nt)
        out, recs = self._matmul_on(path, x, w, bias if epilogue else None)
        if bias is not None and not epilogue:
            out, rec = self.impl(KERNEL_OPS["add_bias_f32"])(out, bias)
            recs = [*recs, rec]
        self.records.extend(matmul.with_path(recs, path))
        return out

    def _matmul_on(
        self, path: str, x: Any, w: MatmulWeight, bias: Any
    ) -> tuple[Any, list[LaunchRecord]]:
        """The path's launches; ``bias`` (only on mmvq/matvec) goes into the epilogue."""
        raise NotImplementedError


def family_of(name: str) -> str:
    """The kernel family of backend method ``name`` (a declared op or a routed one).

    Raises:
        KeyError: ``name`` is neither.
    """
    if name in ROUTED:
        return ROUTED[name]
    if name not in KERNEL_OPS:
        raise KeyError(f"{name!r} is not a backend op (declared: {', '.join(sorted(KERNEL_OPS))})")
    return KERNEL_OPS[name].family


def _op_method(op: KernelOp) -> Any:
    def method(self: Backend, *args: Any, **kwargs: Any) -> Any:
        return self._emit(self.impl(op)(*args, **kwargs))

    sig = inspect.signature(op.ref)
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    method.__name__ = method.__qualname__ = op.name
    method.__doc__ = op.ref.__doc__
    method.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[self_param, *sig.parameters.values()], return_annotation=Any
    )
    return method


for _op in KERNEL_OPS.values():
    if hasattr(Backend, _op.name):
        raise TypeError(f"backend op {_op.name!r} would replace Backend.{_op.name}")
    setattr(Backend, _op.name, _op_method(_op))
del _op


class NumpyBackend(Backend):
    """The CPU backend: the NumPy references of every op. A full backend, not a test double."""

    name = "numpy"
    xp = np
    default_matmul = "f32"

    def asarray(self, a: Any, dtype: Any = None) -> np.ndarray:
        if hasattr(a, "get") and not isinstance(a, np.ndarray):  # a CuPy array
            a = a.get()
        return np.ascontiguousarray(np.asarray(a, dtype=dtype))

    def to_host(self, a: Any) -> np.ndarray:
        return np.asarray(a)

    def device_name(self) -> str:
        import platform

        return f"CPU ({platform.processor() or platform.machine()}, NumPy {np.__version__})"

    def impl(self, op: KernelOp) -> Impl:
        return op.ref

    def _dequantize_f32(self, raw, qt, shape):
        return dequant.ref_dequantize_f32(raw, qt, shape)

    def _matmul_on(self, path, x, w, bias):
        if path == "f32":
            out, rec = matmul.ref_matmul(x, w.cached)
            return out, [rec]
        if path == "quant":  # mmvq's q8 activations for a quantized weight, as the GPU runs it
            if not w.quant.is_quantized:
                out, rec = matvec.ref_matvec(x, w.raw, w.quant, w.shape, bias)
                return out, [rec]
            if mmq.runs_mmq(w.quant, int(x.shape[0])):  # a prefill: quantize_q8 + mmq
                return mmq.ref_mmq(x, w.raw, w.quant, w.shape)
            out, rec = matvec.ref_mmvq(x, w.raw, w.quant, w.shape, bias=bias)
            # the GPU's launches: x quantized by its own launch, or in mmvq's prologue
            pair = matvec.prequantizes(w.quant, *w.shape)
            return out, [matvec.ref_quantize_record(x), rec] if pair else [rec]
        # the f16 path as the GPU runs it: x rounded to f16, the f16 weight, f32 sums
        x16, rec_x = elementwise.ref_convert_f32_f16(x)
        recs = [rec_x]
        w16 = w.cached
        if path == "f16-per-call":
            w16, rec_w = dequant.ref_dequantize_f16(w.raw, w.quant, w.shape)
            recs.append(rec_w)
        out, rec = matmul.ref_matmul(x16.astype(np.float32), w16)
        return out, [*recs, rec]


class CupyBackend(Backend):
    """The GPU backend: CUDA kernels through CuPy (one ``.cu`` per family), cuBLASLt for GEMM."""

    name = "cupy"
    default_matmul = "quant"

    def __init__(self, matmul_mode: str | None = None, w16_cache: str = "auto") -> None:
        super().__init__(matmul_mode, w16_cache)
        if self.matmul_mode == "f32":
            raise ValueError("--matmul f32 runs on the numpy backend only; cupy runs quant or f16")
        import cupy

        self.xp = cupy

    def asarray(self, a: Any, dtype: Any = None) -> Any:
        return self.xp.ascontiguousarray(self.xp.asarray(a, dtype=dtype))

    #: Arrays up to this size come back into page-locked memory (CuPy's pinned pool: a freed
    #: block is reused), a direct DMA; a pageable copy goes through the driver's bounce buffer
    #: (~5 GB/s on the H200 host, session 12: a decode step's 0.6 MB of 0.5B logits). Larger
    #: ones (a prefill's every-position logits) stay pageable: pinned memory is scarce.
    PINNED_MAX_BYTES = 8 * 2**20

    def to_host(self, a: Any) -> np.ndarray:
        if not is_device_array(a):  # already on the host (a runner's own NumPy result)
            return np.asarray(a)
        if a.nbytes > self.PINNED_MAX_BYTES or not a.flags.c_contiguous or a.ndim == 0:
            return self.xp.asnumpy(a)
        return a.get(out=pinned_array(a.size, a.dtype).reshape(a.shape))

    def synchronize(self) -> None:
        self.xp.cuda.get_current_stream().synchronize()

    def device_name(self) -> str:
        props = self.xp.cuda.runtime.getDeviceProperties(self.xp.cuda.Device().id)
        name = props["name"]
        return name.decode() if isinstance(name, bytes) else str(name)

    def impl(self, op: KernelOp) -> Impl:
        return op.launch

    def warm_dequant(self, qt):
        dequant._kernel(dequant.kernel_name(qt))

    def _matmul_on(self, path, x, w, bias):
        if path == "quant":
            if mmq.runs_mmq(w.quant, int(x.shape[0])):
                return mmq.launch_mmq(x, w.raw, w.quant, w.shape)
            return matvec.launch_matvec(x, w.raw, w.quant, w.shape, bias=bias)
        if path == "f16-cached":
            return matmul.launch_matmul_f16w(x, w.cached)
        return matmul.launch_matmul_dequant_f16(x, w.raw, w.quant, w.shape)
