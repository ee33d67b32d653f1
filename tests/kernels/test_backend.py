"""The backend interface: one declaration per backend op (tracekit/kernels/registry.py), from
which both backends' methods are made. Every declared op has a reference, a launcher taking the
reference's arguments and kernels its family's source defines; the NumPy backend runs each op as
its reference does, with the declared flops; a declaration missing a piece is caught."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tracekit.kernels import cuda, registry
from tracekit.kernels.backend import ROUTED, Backend, CupyBackend, NumpyBackend, family_of
from tracekit.kernels.registry import KERNEL_OPS, KernelOp
from tracekit.quants import quant_type

RNG = np.random.default_rng(7)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _q8_table(rows: int, cols: int) -> tuple[np.ndarray, Any, tuple[int, int]]:
    from tracekit.kernels.dequant import random_blocks

    qt = quant_type("Q8_0")
    raw = random_blocks(qt, rows * cols // qt.block_size, RNG).reshape(-1)
    return raw, qt, (rows, cols)


#: op -> (arguments, keyword arguments, elements its flops are counted over). Odd shapes
#: (45 x 65) so no size is a multiple of a vector width.
SAMPLES: dict[str, Callable[[], tuple[tuple, dict, int]]] = {
    "add_f32": lambda: ((_f32(45, 65), _f32(45, 65)), {}, 45 * 65),
    "add_bias_f32": lambda: ((_f32(45, 65), _f32(65)), {}, 45 * 65),
    "mul_f32": lambda: ((_f32(45, 65), _f32(45, 65)), {}, 45 * 65),
    "silu_f32": lambda: ((_f32(45, 65),), {}, 45 * 65),
    "gelu_tanh_f32": lambda: ((_f32(45, 65),), {}, 45 * 65),
    "scale_f32": lambda: ((_f32(45, 65), 0.37), {}, 45 * 65),
    "softcap_f32": lambda: ((_f32(45, 65), 30.0), {}, 45 * 65),
    "slice_cols_f32": lambda: ((_f32(45, 65), 3, 17), {}, 45 * 17),
    "glu_f32": lambda: ((_f32(45, 130), "gelu_tanh"), {}, 45 * 65),
    "f32_bits_to_i32": lambda: ((np.arange(45, dtype=np.int32).view(np.float32),), {}, 45),
    "convert_f32_f16": lambda: ((_f32(45, 65),), {}, 45 * 65),
    "dequantize_f16": lambda: ((*_q8_table(5, 64)[:2], (5, 64)), {}, 5 * 64),
    "embed_rows": lambda: (
        (*_q8_table(9, 64), np.array([0, 8, 3], np.int32)),
        {"ids_checked": True},
        3 * 64,
    ),
    "gather_rows_f32": lambda: ((_f32(9, 65), np.array([8, 0, 0, 4], np.int32)), {}, 4 * 65),
    "rms_norm_f32": lambda: ((_f32(45, 65), _f32(65), 1e-6), {}, 45 * 65),
    "add_rms_norm_f32": lambda: ((_f32(45, 65), _f32(45, 65), _f32(65), 1e-6), {}, 45 * 65),
    "rope_f32": lambda: (
        (_f32(5, 3, 64), np.arange(2, 7, dtype=np.int32), 1e4, True, 1.0, None),
        {},
        5 * 3 * 64,
    ),
    "kv_store_f32": lambda: (
        (
            np.zeros((16, 2, 64), np.float32),
            _f32(5, 2, 64),
            np.zeros((16, 2, 64), np.float32),
            _f32(5, 2, 64) + 1,
            4,
            np.arange(4, 9, dtype=np.int32),
        ),
        {},
        2 * 5 * 2 * 64,
    ),
    "attention_f32": lambda: (
        (_f32(3, 4, 64), _f32(16, 2, 64), _f32(16, 2, 64), 5, 0.125, 0, 0.0),
        {"positions": np.arange(5, 8, dtype=np.int32)},
        3,
    ),
    "softmax_f32": lambda: ((_f32(45, 65),), {}, 45 * 65),
    "argmax_f32": lambda: ((_f32(45, 65),), {}, 45 * 65),
}


# -- what a declaration must have -------------------------------------------------------------
def signature_problems(op: KernelOp) -> list[str]:
    """Why ``op.launch`` cannot take the reference's arguments (empty: it can)."""
    ref = inspect.signature(op.ref).parameters
    lau = inspect.signature(op.launch).parameters
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ref_pos = [p for p in ref.values() if p.kind in kinds]
    lau_pos = [p for p in lau.values() if p.kind in kinds]
    problems = []
    for i, p in enumerate(ref_pos):
        q = lau_pos[i] if i < len(lau_pos) else None
        if q is None or q.name != p.name or q.default != p.default:
            problems.append(f"{op.name}: positional {p.name} (#{i}) is {q} in the launcher")
    for p in ref.values():
        if p.kind is inspect.Parameter.KEYWORD_ONLY and (
            p.name not in lau or lau[p.name].default != p.default
        ):
            problems.append(f"{op.name}: keyword {p.name} is {lau.get(p.name)} in the launcher")
    for q in list(lau.values())[len(ref_pos) :]:
        if q.name not in ref and q.default is inspect.Parameter.empty:
            problems.append(f"{op.name}: the launcher requires {q.name}, the reference has none")
    return problems


def missing_kernels(op: KernelOp) -> list[str]:
    """Kernels of ``op`` its family's CUDA source (with generated instantiations) lacks."""
    src = cuda.source(op.family)
    return [k for k in op.kernels if not re.search(rf"\b{re.escape(k)}\b", src)]


def test_every_declared_op_has_a_reference_a_launcher_and_a_sample() -> None:
    assert set(SAMPLES) == set(KERNEL_OPS)  # a new op needs a sample here
    for op in KERNEL_OPS.values():
        assert op.ref.__name__ == f"ref_{op.name}" and op.launch.__name__ == f"launch_{op.name}"
        assert op.ref.__doc__ and op.launch.__doc__


@pytest.mark.parametrize("name", sorted(KERNEL_OPS))
def test_the_launcher_takes_the_references_arguments(name: str) -> None:
    assert signature_problems(KERNEL_OPS[name]) == []


@pytest.mark.parametrize("name", sorted(KERNEL_OPS))
def test_every_kernel_of_an_op_is_in_its_family_source(name: str) -> None:
    assert missing_kernels(KERNEL_OPS[name]) == []


def test_a_declaration_missing_a_piece_is_caught() -> None:
    def ref_x(x: Any, s: float, *, k: int = 0) -> Any:
        raise AssertionError

    def launch_x(x: Any, out: Any = None) -> Any:  # lacks s and k
        raise AssertionError

    def launch_y(x: Any, s: float, t: int, *, k: int = 0) -> Any:  # requires t
        raise AssertionError

    bad = KernelOp("x_f32", "elementwise", ref_x, launch_x)
    assert len(signature_problems(bad)) == 2
    assert signature_problems(KernelOp("x_f32", "elementwise", ref_x, launch_y)) == [
        "x_f32: the launcher requires t, the reference has none"
    ]
    assert missing_kernels(bad) == ["x_f32"]  # no such __global__ in elementwise.cu
    assert (
        missing_kernels(KernelOp("x", "elementwise", ref_x, launch_x, kernels=("add_f32",))) == []
    )
    with pytest.raises(ValueError, match="no flops per element"):
        registry.flops("attention_f32", 10)


def test_an_op_is_declared_once() -> None:
    before = dict(KERNEL_OPS)
    with pytest.raises(ValueError, match="'add_f32' is declared twice"):
        registry.declare([KERNEL_OPS["add_f32"]])
    assert KERNEL_OPS == before


# -- the backends are made from the declarations ----------------------------------------------
def test_each_backend_runs_its_side_of_every_declaration() -> None:
    be = NumpyBackend()
    for op in KERNEL_OPS.values():
        assert be.impl(op) is op.ref
        assert CupyBackend.impl(None, op) is op.launch  # type: ignore[arg-type]
        method = getattr(Backend, op.name)
        assert list(inspect.signature(method).parameters)[1:] == list(
            inspect.signature(op.ref).parameters
        )
    for name in ROUTED:  # the matmul is routed by each backend, not declared
        assert name not in KERNEL_OPS and callable(getattr(Backend, name))
        assert "_matmul_on" in vars(NumpyBackend) and "_matmul_on" in vars(CupyBackend)
    with pytest.raises(KeyError, match="'nope_f32' is not a backend op"):
        family_of("nope_f32")


def _copy(a: Any) -> Any:
    return a.copy() if isinstance(a, np.ndarray) else a


@pytest.mark.parametrize("name", sorted(KERNEL_OPS))
def test_the_numpy_backend_runs_each_op_as_its_reference(name: str) -> None:
    op = KERNEL_OPS[name]
    args, kw, elements = SAMPLES[name]()
    want, rec = op.ref(*map(_copy, args), **{k: _copy(v) for k, v in kw.items()})
    be = NumpyBackend()
    got = getattr(be, name)(*map(_copy, args), **{k: _copy(v) for k, v in kw.items()})
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert be.take_records() == [rec]
    assert be.run(name, *map(_copy, args), **kw) is not None and len(be.records) == 1
    assert rec.kernel in op.kernels
    if op.flops is not None:
        assert rec.flops == op.flops * elements


def test_per_item_geometry_is_declared_for_the_streaming_kernels_only() -> None:
    from tracekit.kernels import elementwise

    streaming = {n for n, op in KERNEL_OPS.items() if op.per_item is not None}
    assert streaming == {
        "add_f32", "mul_f32", "silu_f32", "gelu_tanh_f32", "scale_f32", "softcap_f32",
        "glu_f32", "f32_bits_to_i32", "convert_f32_f16",
    }  # fmt: skip
    with pytest.raises(ValueError, match="add_bias_f32 is not a streaming kernel"):
        elementwise.elems_per_item("add_bias_f32")


def test_positions_that_disagree_with_n_past_are_refused_by_the_reference() -> None:
    from tracekit.kernels.checks import KernelInputError

    args, _, _ = SAMPLES["kv_store_f32"]()
    kc, k, vc, v, start, _pos = args
    with pytest.raises(KernelInputError, match="positions start at 5, but n_past is 4"):
        NumpyBackend().kv_store_f32(kc, k, vc, v, start, np.arange(5, 10, dtype=np.int32))
