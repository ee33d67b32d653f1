"""The graph ops: one declaration each (:class:`Op`: name, arm, the backend ops it calls).

This is hop 1 of the dispatch chain (``Op::Add`` arm -> ``CudaState::add`` in the seed). An arm
takes (backend, node, step, *inputs) and calls ONE backend op; it does not know grid sizes or
kernel names; it reshapes its inputs (views only), checks the shape invariants the next hop
relies on and names the node in every error. Attention is the one fixed sequence: store K
and V, attend (two launches in one node).

An op is declared by decorating its arm with :func:`op`, naming the backend ops it calls; its
family, reference, launcher, flops and stamping are those backend ops' declarations
(``tracekit/kernels/registry.py``), so nothing about an op is typed twice. A view op (``plane``)
calls none: it names its family instead, and its nodes never launch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tracekit.kernels.backend import family_of
from tracekit.kernels.registry import KERNEL_OPS, KernelOp

if TYPE_CHECKING:
    from tracekit.kernels.backend import Backend
    from tracekit.model.weights import Weights
    from tracekit.runner.node import Node

Arm = Callable[..., Any]


@dataclass(frozen=True)
class Op:
    """A graph op: its name (the ``op`` of a node), its arm, and the backend ops the arm calls
    in launch order (declared ops of tracekit/kernels/registry.py, or the routed matmul)."""

    name: str
    arm: Arm
    calls: tuple[str, ...]
    #: a view op's family (it calls no backend op); None for the others
    view_of: str | None = None

    @property
    def family(self) -> str:
        """The node's kernel family: that of the backend op it calls first (a view's own)."""
        return self.view_of if self.view_of is not None else family_of(self.calls[0])

    @property
    def kernel_ops(self) -> tuple[KernelOp, ...]:
        """The declarations of the backend ops it calls (the routed matmul has none)."""
        return tuple(KERNEL_OPS[c] for c in self.calls if c in KERNEL_OPS)


#: op name -> declaration, in the order the arms are declared below.
OPS: dict[str, Op] = {}


def op(*calls: str, view_of: str | None = None) -> Callable[[Arm], Arm]:
    """Declare the decorated arm as the graph op of its name, calling backend ops ``calls``;
    or, with ``view_of`` (a kernel family) and no calls, a view op: its arm returns a view of
    its input, and its nodes never launch.

    Raises:
        ValueError: no backend op is named and no view family, both, or the op is declared
            twice.
        KeyError: a named backend op is not declared.
    """
    if not calls and view_of is None:
        raise ValueError("a graph op calls at least one backend op (or is a view: view_of=)")
    if calls and view_of is not None:
        raise ValueError(f"view op of {view_of!r} calls backend ops {calls}: a view launches none")
    for c in calls:
        family_of(c)  # raises for an undeclared backend op

    def register(arm: Arm) -> Arm:
        if arm.__name__ in OPS:
            raise ValueError(f"graph op {arm.__name__!r} is declared twice")
        OPS[arm.__name__] = Op(arm.__name__, arm, tuple(calls), view_of)
        return arm

    return register


class OpError(ValueError):
    """A node's inputs violate its op's contract; the message names the node."""


@dataclass
class StepContext:
    """What the arms of one step share: step inputs, the KV cache and the prepared weights.

    ``inputs`` holds the step inputs on the backend: ``tokens`` and ``positions`` (int32 [nt],
    positions n_past .. n_past+nt-1) and ``rows`` (int32 [nr], the rows whose logits are made).
    """

    n_past: int
    nt: int
    nr: int
    inputs: dict[str, Any]
    k_cache: list[Any]
    v_cache: list[Any]
    weights: Weights


def _fail(node: Node, msg: str) -> OpError:
    return OpError(f"node {node.name} ({node.op}): {msg}")


def _want(node: Node, x: Any, shape: tuple[int, ...], what: str) -> None:
    if tuple(x.shape) != shape:
        raise _fail(node, f"{what} has shape {tuple(x.shape)}, expected {shape}")


@op("embed_rows")
def embed_rows(be: Backend, node: Node, st: StepContext, tokens: Any) -> Any:
    t = st.weights.embed
    # Session.check_step range-checked the ids on the host before any kernel ran.
    return be.embed_rows(t.raw, t.qtype, t.shape, tokens, ids_checked=True)


@op("gather_rows_f32")
def gather_rows(be: Backend, node: Node, st: StepContext, x: Any, rows: Any) -> Any:
    _want(node, x, (st.nt, int(node.shape[-1])), "input")  # type: ignore[arg-type]
    return be.gather_rows_f32(x, rows)


@op("scale_f32")
def scale(be: Backend, node: Node, st: StepContext, x: Any) -> Any:
    return be.scale_f32(x, float(node.attrs["scale"]))


@op("add_f32")
def add(be: Backend, node: Node, st: StepContext, x: Any, y: Any) -> Any:
    if tuple(x.shape) != tuple(y.shape):
        raise _fail(node, f"inputs have shapes {tuple(x.shape)} and {tuple(y.shape)}")
    return be.add_f32(x, y)


@op("add_bias_f32")
def add_bias(be: Backend, node: Node, st: StepContext, y: Any) -> Any:
    b = st.weights.vectors[node.weight]
    if y.ndim != 2 or int(b.shape[0]) != int(y.shape[1]):
        raise _fail(node, f"bias {tuple(b.shape)} does not match rows {tuple(y.shape)}")
    return be.add_bias_f32(y, b)  # in place: y is the matmul output, read by nothing else


@op("mul_f32")
def mul(be: Backend, node: Node, st: StepContext, x: Any, y: Any) -> Any:
    if tuple(x.shape) != tuple(y.shape):
        raise _fail(node, f"inputs have shapes {tuple(x.shape)} and {tuple(y.shape)}")
    return be.mul_f32(x, y)


@op("silu_f32")
def silu(be: Backend, node: Node, st: StepContext, x: Any) -> Any:
    return be.silu_f32(x)


@op("gelu_tanh_f32")
def gelu_tanh(be: Backend, node: Node, st: StepContext, x: Any) -> Any:
    return be.gelu_tanh_f32(x)


@op("glu_f32")
def glu(be: Backend, node: Node, st: StepContext, x: Any) -> Any:
    # a fused [gate | up] matmul output [nt, 2 n_ff]: act(gate) * up in one launch, in place of
    # the two slices, the act and the mul (bit for bit theirs: kernels/elementwise.py)
    n = int(node.shape[-1])  # type: ignore[arg-type]
    _want(node, x, (st.nt, 2 * n), "input")
    return be.glu_f32(x, str(node.attrs["act"]))


@op("softcap_f32")
def softcap(be: Backend, node: Node, st: StepContext, x: Any) -> Any:
    return be.softcap_f32(x, float(node.attrs["cap"]))


@op("slice_cols_f32")
def slice_cols(be: Backend, node: Node, st: StepContext, x: Any) -> Any:
    start, width = int(node.attrs["start"]), int(node.attrs["width"])
    if x.ndim == 3:  # heads of a rope over q and k (rope_qk): columns of its [nt, heads x hd]
        hd = int(x.shape[2])
        if start % hd or width % hd:
            raise _fail(node, f"columns [{start}, {start + width}) are not whole heads of {hd}")
        rows = slice_cols(be, node, st, x.reshape(x.shape[0], -1))
        return rows.reshape(rows.shape[0], width // hd, hd)
    if x.ndim != 2 or start + width > int(x.shape[1]):
        raise _fail(node, f"input {tuple(x.shape)} has no columns [{start}, {start + width})")
    if int(x.shape[0]) == 1:
        # one row (a decode step): the columns are contiguous, so the part is a view of the
        # fused output, as llama.cpp's: no launch, no record (the node's launches are none).
        # The kernels that read it take any offset (elementwise.cu moves float4s only when
        # the pointer is 16-byte aligned); an in-place write into it is one into x too
        # (graph.overwritten_in_place).
        return x[:, start : start + width]
    return be.slice_cols_f32(x, start, width)


@op("rms_norm_f32")
def rms_norm(be: Backend, node: Node, st: StepContext, x: Any) -> Any:
    w = st.weights.vectors[node.weight]
    heads = node.attrs.get("heads")
    if heads:  # per-head norm (gemma3 q/k): [nt, heads * hd] -> [nt, heads, hd] rows of hd
        hd = int(w.shape[0])
        if x.size != x.shape[0] * heads * hd:
            raise _fail(node, f"input {tuple(x.shape)} is not [nt, {heads} heads x {hd}]")
        x = x.reshape(x.shape[0], heads, hd)
    elif int(x.shape[-1]) != int(w.shape[0]):
        raise _fail(node, f"input {tuple(x.shape)} does not match weight {tuple(w.shape)}")
    return be.rms_norm_f32(x, w, float(node.attrs["eps"]))


@op("add_rms_norm_f32")
def add_rms_norm(be: Backend, node: Node, st: StepContext, x: Any, y: Any) -> Any:
    # a residual add and the rms_norm that reads it (runner/graph.py): [2, nt, e], plane 0 the
    # sum, plane 1 its norm, each bit for bit what the add and rms_norm nodes computed
    w = st.weights.vectors[node.weight]
    if tuple(x.shape) != tuple(y.shape):
        raise _fail(node, f"inputs have shapes {tuple(x.shape)} and {tuple(y.shape)}")
    if x.ndim != 2 or int(x.shape[-1]) != int(w.shape[0]):
        raise _fail(node, f"input {tuple(x.shape)} is not [nt, {int(w.shape[0])}] (the weight's)")
    return be.add_rms_norm_f32(x, y, w, float(node.attrs["eps"]))


@op(view_of="norm")
def plane(be: Backend, node: Node, st: StepContext, x: Any) -> Any:
    # one plane of an add_rms_norm output [2, nt, e]: a view, never a launch on any step (a
    # plane of a C-contiguous array is one contiguous block). A write into it is one into x
    # too (graph.overwritten_in_place).
    p = int(node.attrs["plane"])
    if x.ndim != 3 or not 0 <= p < int(x.shape[0]):
        raise _fail(node, f"input {tuple(x.shape)} has no plane {p} (expected [planes, nt, e])")
    return x[p]


@op("rope_f32")
def rope(be: Backend, node: Node, st: StepContext, x: Any, positions: Any) -> Any:
    heads = int(node.attrs["heads"])
    # llama 3: rope_freqs.weight, the per-pair angle divisors (an f32 vector on the backend)
    factors = st.weights.vectors[node.weight] if node.weight else None
    if x.ndim == 2:
        if x.shape[1] % heads:
            raise _fail(node, f"input {tuple(x.shape)} does not split into {heads} heads")
        x = x.reshape(x.shape[0], heads, x.shape[1] // heads)
    return be.rope_f32(
        x,
        positions,
        float(node.attrs["base"]),
        bool(node.attrs["neox"]),
        float(node.attrs["freq_scale"]),
        factors,
    )


@op("kv_store_f32", "attention_f32")
def attention(be: Backend, node: Node, st: StepContext, q: Any, k: Any, v: Any) -> Any:
    a = node.attrs
    n_head, n_kv, hd = int(a["n_head"]), int(a["n_head_kv"]), int(a["head_dim"])
    nt, il = st.nt, node.layer
    assert il is not None
    _want(node, q, (nt, n_head, hd), "q")
    _want(node, k, (nt, n_kv, hd), "k")
    if v.size != nt * n_kv * hd:
        raise _fail(node, f"v has shape {tuple(v.shape)}, expected [{nt}, {n_kv * hd}]")
    v = v.reshape(nt, n_kv, hd)
    kc, vc = st.k_cache[il], st.v_cache[il]
    if st.n_past + nt > int(kc.shape[0]):
        raise _fail(
            node, f"n_past {st.n_past} + {nt} tokens exceeds the KV cache's {kc.shape[0]} rows"
        )
    pos = st.inputs["positions"]  # n_past on the device too: a replayed step stays right
    be.kv_store_f32(kc, k, vc, v, st.n_past, pos)  # one launch: K and V
    return be.attention_f32(
        q,
        kc,
        vc,
        st.n_past,
        float(a["scale"]),
        int(a["window"]),
        float(a["softcap"]),
        positions=pos,
    )


@op("matmul")
def matmul(be: Backend, node: Node, st: StepContext, x: Any) -> Any:
    w = st.weights.matmul[node.weight]
    k = int(node.attrs["k"])
    if x.ndim != 2 or int(x.shape[1]) != k:
        raise _fail(node, f"input {tuple(x.shape)} is not [rows, k={k}]")
    # a projection's bias (qwen2's q, k, v) is part of the node: in mmvq's epilogue on decode
    bias = st.weights.vectors[node.attrs["bias"]] if node.attrs.get("bias") else None
    if bias is not None and int(bias.shape[0]) != w.shape[0]:
        raise _fail(node, f"bias {tuple(bias.shape)} does not match the weight's {w.shape[0]} rows")
    return be.matmul(x, w, bias)
