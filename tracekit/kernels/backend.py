"""Hop 2 of the dispatch chain: the backend method.

    runner/ (graph op)  ->  backend method  ->  launcher (grid contract)  ->  kernel

Two implementations of one interface. ``CupyBackend`` calls the launchers of each kernel family
(``tracekit/kernels/<family>.py``, which load ``<family>.cu``); ``NumpyBackend`` calls the NumPy
references that sit beside those launchers. Both append one :class:`LaunchRecord` per launch to
``self.records``; the runner takes them after each node. A backend is chosen once per run
(``auto``: cupy when a GPU is usable, else numpy) and never falls back mid-run.
"""

from __future__ import annotations

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
    norm,
    reduce,
    rope,
)
from tracekit.kernels.checks import KernelInputError
from tracekit.kernels.launch import LaunchRecord
from tracekit.kernels.matmul import MatmulWeight
from tracekit.quants import QuantType, quant_type

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

    # -- ops (each returns its output; the launch records go to self.records) ---------------
    def add_f32(self, x: Any, y: Any) -> Any:
        raise NotImplementedError

    def add_bias_f32(self, y: Any, b: Any) -> Any:
        raise NotImplementedError

    def mul_f32(self, x: Any, y: Any) -> Any:
        raise NotImplementedError

    def silu_f32(self, x: Any) -> Any:
        raise NotImplementedError

    def gelu_tanh_f32(self, x: Any) -> Any:
        raise NotImplementedError

    def scale_f32(self, x: Any, s: float) -> Any:
        raise NotImplementedError

    def softcap_f32(self, x: Any, cap: float) -> Any:
        raise NotImplementedError

    def slice_cols_f32(self, x: Any, start: int, width: int) -> Any:
        raise NotImplementedError

    def f32_bits_to_i32(self, x: Any) -> Any:
        raise NotImplementedError

    def convert_f32_f16(self, x: Any) -> Any:
        raise NotImplementedError

    def dequantize_f16(self, raw: Any, qtype: QuantType, shape: tuple[int, ...]) -> Any:
        raise NotImplementedError

    def embed_rows(
        self,
        raw: Any,
        qtype: QuantType,
        shape: tuple[int, int],
        ids: Any,
        ids_checked: bool = False,
    ) -> Any:
        """Rows ``ids`` of the table as f32. ``ids_checked``: the caller range-checked the ids on
        the host already, so device ids need no error flag (and no sync) after the launch."""
        raise NotImplementedError

    def gather_rows_f32(self, x: Any, ids: Any) -> Any:
        raise NotImplementedError

    def rms_norm_f32(self, x: Any, w: Any, eps: float) -> Any:
        raise NotImplementedError

    def rope_f32(
        self,
        x: Any,
        positions: Any,
        base: float,
        neox: bool,
        freq_scale: float = 1.0,
        freq_factors: Any = None,
    ) -> Any:
        raise NotImplementedError

    def kv_store_f32(self, cache: Any, x: Any, start: int, positions: Any = None) -> Any:
        """``positions`` (the step's int32 positions, ``[0] == start``) lets the device read the
        start row at run time, so a replayed step is right at any position."""
        raise NotImplementedError

    def attention_f32(
        self,
        q: Any,
        k_cache: Any,
        v_cache: Any,
        n_past: int,
        scale: float,
        window: int = 0,
        softcap: float = 0.0,
        positions: Any = None,
    ) -> Any:
        raise NotImplementedError

    def softmax_f32(self, x: Any) -> Any:
        raise NotImplementedError

    def argmax_f32(self, x: Any) -> Any:
        raise NotImplementedError

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

    def matmul(self, x: Any, w: MatmulWeight) -> Any:
        """x [nt, k] f32 times w [n, k]ᵀ (from :meth:`matmul_weight`) -> [nt, n] f32, on the path
        ``matmul.choose_path`` picks; every launch record names that path."""
        if not isinstance(w, MatmulWeight):
            raise KernelInputError(
                f"matmul weight is a {type(w).__name__}, expected a MatmulWeight (matmul_weight)"
            )
        path = matmul.choose_path(self.matmul_mode, w, int(x.shape[0]) if x.ndim else 0)
        out, recs = self._matmul_on(path, x, w)
        self.records.extend(matmul.with_path(recs, path))
        return out

    def _matmul_on(self, path: str, x: Any, w: MatmulWeight) -> tuple[Any, list[LaunchRecord]]:
        raise NotImplementedError


def _same_start(positions: Any, start: int, what: str) -> None:
    """On the host the scalar is the truth; positions, when given, must agree with it."""
    if positions is not None and len(positions) and int(positions[0]) != int(start):
        raise KernelInputError(
            f"{what} positions start at {int(positions[0])}, but n_past is {int(start)}"
        )


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

    def add_f32(self, x, y):
        return self._emit(elementwise.ref_add_f32(x, y))

    def add_bias_f32(self, y, b):
        return self._emit(elementwise.ref_add_bias_f32(y, b))

    def mul_f32(self, x, y):
        return self._emit(elementwise.ref_mul_f32(x, y))

    def silu_f32(self, x):
        return self._emit(elementwise.ref_silu_f32(x))

    def gelu_tanh_f32(self, x):
        return self._emit(elementwise.ref_gelu_tanh_f32(x))

    def scale_f32(self, x, s):
        return self._emit(elementwise.ref_scale_f32(x, s))

    def softcap_f32(self, x, cap):
        return self._emit(elementwise.ref_softcap_f32(x, cap))

    def slice_cols_f32(self, x, start, width):
        return self._emit(elementwise.ref_slice_cols_f32(x, start, width))

    def f32_bits_to_i32(self, x):
        return self._emit(elementwise.ref_f32_bits_to_i32(x))

    def convert_f32_f16(self, x):
        return self._emit(elementwise.ref_convert_f32_f16(x))

    def dequantize_f16(self, raw, qtype, shape):
        return self._emit(dequant.ref_dequantize_f16(raw, quant_type(qtype), tuple(shape)))

    def embed_rows(self, raw, qtype, shape, ids, ids_checked=False):
        return self._emit(embed.ref_embed_rows(raw, quant_type(qtype), tuple(shape), ids))

    def gather_rows_f32(self, x, ids):
        return self._emit(embed.ref_gather_rows_f32(x, ids))

    def rms_norm_f32(self, x, w, eps):
        return self._emit(norm.ref_rms_norm_f32(x, w, eps))

    def rope_f32(self, x, positions, base, neox, freq_scale=1.0, freq_factors=None):
        return self._emit(rope.ref_rope_f32(x, positions, base, neox, freq_scale, freq_factors))

    def kv_store_f32(self, cache, x, start, positions=None):
        _same_start(positions, start, "KV store")
        return self._emit(attention.ref_kv_store_f32(cache, x, start))

    def attention_f32(
        self, q, k_cache, v_cache, n_past, scale, window=0, softcap=0.0, positions=None
    ):
        _same_start(positions, n_past, "attention")
        return self._emit(
            attention.ref_attention_f32(q, k_cache, v_cache, n_past, scale, window, softcap)
        )

    def softmax_f32(self, x):
        return self._emit(reduce.ref_softmax_f32(x))

    def argmax_f32(self, x):
        return self._emit(reduce.ref_argmax_f32(x))

    def _dequantize_f32(self, raw, qt, shape):
        return dequant.ref_dequantize_f32(raw, qt, shape)

    def _matmul_on(self, path, x, w):
        if path == "f32":
            out, rec = matmul.ref_matmul(x, w.cached)
            return out, [rec]
        if path == "quant":  # mmvq's q8 activations for a quantized weight, as the GPU runs it
            ref = matvec.ref_mmvq if w.quant.is_quantized else matvec.ref_matvec
            out, rec = ref(x, w.raw, w.quant, w.shape)
            return out, [rec]
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

    def to_host(self, a: Any) -> np.ndarray:
        return self.xp.asnumpy(a)

    def synchronize(self) -> None:
        self.xp.cuda.get_current_stream().synchronize()

    def device_name(self) -> str:
        props = self.xp.cuda.runtime.getDeviceProperties(self.xp.cuda.Device().id)
        name = props["name"]
        return name.decode() if isinstance(name, bytes) else str(name)

    def add_f32(self, x, y):
        return self._emit(elementwise.launch_add_f32(x, y))

    def add_bias_f32(self, y, b):
        return self._emit(elementwise.launch_add_bias_f32(y, b))

    def mul_f32(self, x, y):
        return self._emit(elementwise.launch_mul_f32(x, y))

    def silu_f32(self, x):
        return self._emit(elementwise.launch_silu_f32(x))

    def gelu_tanh_f32(self, x):
        return self._emit(elementwise.launch_gelu_tanh_f32(x))

    def scale_f32(self, x, s):
        return self._emit(elementwise.launch_scale_f32(x, s))

    def softcap_f32(self, x, cap):
        return self._emit(elementwise.launch_softcap_f32(x, cap))

    def slice_cols_f32(self, x, start, width):
        return self._emit(elementwise.launch_slice_cols_f32(x, start, width))

    def f32_bits_to_i32(self, x):
        return self._emit(elementwise.launch_f32_bits_to_i32(x))

    def convert_f32_f16(self, x):
        return self._emit(elementwise.launch_convert_f32_f16(x))

    def dequantize_f16(self, raw, qtype, shape):
        return self._emit(dequant.launch_dequantize_f16(raw, quant_type(qtype), tuple(shape)))

    def embed_rows(self, raw, qtype, shape, ids, ids_checked=False):
        return self._emit(
            embed.launch_embed_rows(
                raw, quant_type(qtype), tuple(shape), ids, ids_checked=ids_checked
            )
        )

    def gather_rows_f32(self, x, ids):
        return self._emit(embed.launch_gather_rows_f32(x, ids))

    def rms_norm_f32(self, x, w, eps):
        return self._emit(norm.launch_rms_norm_f32(x, w, eps))

    def rope_f32(self, x, positions, base, neox, freq_scale=1.0, freq_factors=None):
        return self._emit(rope.launch_rope_f32(x, positions, base, neox, freq_scale, freq_factors))

    def kv_store_f32(self, cache, x, start, positions=None):
        return self._emit(attention.launch_kv_store_f32(cache, x, start, positions))

    def attention_f32(
        self, q, k_cache, v_cache, n_past, scale, window=0, softcap=0.0, positions=None
    ):
        return self._emit(
            attention.launch_attention_f32(
                q, k_cache, v_cache, n_past, scale, window, softcap, positions=positions
            )
        )

    def softmax_f32(self, x):
        return self._emit(reduce.launch_softmax_f32(x))

    def argmax_f32(self, x):
        return self._emit(reduce.launch_argmax_f32(x))

    def warm_dequant(self, qt):
        dequant._kernel(dequant.kernel_name(qt))

    def _matmul_on(self, path, x, w):
        if path == "quant":
            return matvec.launch_matvec(x, w.raw, w.quant, w.shape)
        if path == "f16-cached":
            return matmul.launch_matmul_f16w(x, w.cached)
        return matmul.launch_matmul_dequant_f16(x, w.raw, w.quant, w.shape)
