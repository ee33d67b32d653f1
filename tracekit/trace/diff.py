"""Node-by-node comparison of two traces of the same model (GPU vs CPU, two capture modes, …).

Tolerance: a statistic (min, max, mean, std, absmax) of a node's output differs when
``|a - b| > atol + rtol * scale``, with ``scale`` the larger absmax of the two outputs: the
error is judged against the tensor's magnitude, so a mean near zero with a large spread is not
flagged for a rounding-sized difference. Heatmap cells get the same tolerance plus each side's
quantisation step ((hi - lo) / 508: codes are 8-bit), and the NaN/Inf cell pattern must match.
The NaN, +Inf and -Inf counts must be equal.

Tolerances are calibrated per numerical path (:data:`PATHS`, :func:`calibrated`): the path of a
pair of traces is the looser of the two runs' paths, and the values, with how they were
measured, are written into the report. ``rtol``/``atol`` given by the caller override them.

With tensor dumps on both sides (``record-trace --dump``, tracekit/trace/tensors.py), every
node output kept by both is compared exactly (:class:`TensorDiff`: max |a - b|, that over
max(|a|max, |b|max) = ``rel``, the element where |a - b| peaks), and error INTRODUCED at a node
is told from error CARRIED from its inputs (:func:`_introduced`):

- ``carried`` = the largest ``rel`` among the node's data inputs in the same step (step inputs
  are the same ids on both sides: 0), and for ``attention`` also its K and V inputs in every
  earlier step (the KV cache it reads). Unknown (None) when an input was not dumped.
- Elementwise ops (add, add_bias, mul, silu, gelu_tanh, scale, glu) are judged element by
  element: what the inputs' differences can explain at each element is bounded (add: |da| +
  |db|; mul: |b||da| + |a||db| + |da||db|; silu/gelu: 1.2 |dx|; scale: |s||dx|; glu, act(g) u
  of x = [g | u]: |g||du| + 1.2 |u||dg| + 1.2 |dg||du|; a bias is a weight: 0; slice_cols,
  a copy of some columns: |dx| there, so a slice of a fused row introduces nothing however
  its own scale differs from the row's; plane, a view of one plane of an add_rms_norm output:
  |dx| of that plane, likewise),
  and ``introduced`` = max(|d out| - that bound) / scale. These ops run in f32 on every path,
  so the tolerance is the path's ``introduced_rtol``.
- Any other node (matmul, norm, rope, attention, gather) introduces error when
  ``rel > tensor_rtol`` and ``rel > GROWTH x carried``; ``introduced`` = rel then, else 0.

The first node (step-major, in execution order) whose introduced error is above its tolerance is
named: that is the node that broke it. ``rel`` above tolerance with a node's inputs not dumped
is reported as such (origin unknown).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracekit.kernels.stats import decode_heatmap

STAT_KEYS = ("min", "max", "mean", "std", "absmax")
COUNT_KEYS = ("nan", "pos_inf", "neg_inf")
#: A non-elementwise node introduces error when its rel exceeds this many times what it carries.
GROWTH = 4.0


@dataclass(frozen=True)
class PathTolerance:
    """The tolerances of one numerical path, and how they were calibrated."""

    name: str
    #: statistics comparison (no dumps): |a - b| <= atol + rtol x scale
    rtol: float | None
    atol: float
    #: tensor comparison: a non-elementwise node's rel; an elementwise node's introduced error
    tensor_rtol: float | None
    introduced_rtol: float
    how: str


#: The numerical paths a run takes, by how its matmuls compute (the run's backend and, for a
#: quantized-activation GPU path, ``run.matmul``; :func:`run_path`).
PATHS: dict[str, PathTolerance] = {
    "f32-cpu": PathTolerance(
        "f32-cpu",
        rtol=1e-5,
        atol=1e-6,
        tensor_rtol=1e-5,
        introduced_rtol=1e-5,
        how="NumPy, f32 on exact dequantized weights: two CPU recordings of the demo model "
        "(6 steps) and SmolLM2 are bit-identical (max deviation 0); the room is for another "
        "BLAS or thread count's summation order",
    ),
    "f16-gemm-gpu": PathTolerance(
        "f16-gemm-gpu",
        rtol=1e-2,
        atol=1e-5,
        tensor_rtol=2e-2,
        introduced_rtol=1e-4,
        how="CuPy, f16 weights and activations into cuBLAS, f32 accumulate. Statistics: the "
        "shipped H200 traces vs CPU recordings of the same prompt deviate at most 7.4e-4 (demo, "
        "6 steps) and 3.9e-3 (SmolLM2, 6 steps, blk.5.attn_output min) of the tensor's absmax, "
        "so rtol 1e-2 leaves 2.5x. Tensors, with the GPU's f16 GEMM rounding emulated on the "
        "CPU (every node dumped, 6 steps): largest node rel 1.2e-3 (demo) and 6.5e-3 (SmolLM2, "
        "blk.5.attn_output), held to 2e-2 as tests/runner/test_gpu_parity.py does; the "
        "elementwise nodes' introduced error was 0 (their f32 ops add only rounding), held "
        "to 1e-4",
    ),
    # The quant path with 8-bit activations (mmvq) against a run of another path (a CPU f32
    # recording, the f16 path). Two runs both on the quant path: "quant-act-pair" below.
    "quant-act-gpu": PathTolerance(
        "quant-act-gpu",
        rtol=0.35,
        atol=1e-5,
        tensor_rtol=0.05,
        introduced_rtol=1e-4,
        how="CuPy quant path (x quantized to 8 bits per 32 values, DP4A) vs the CPU's f32 path, "
        "6 steps on the H200: largest deviation 0.021 (demo), 0.045 (llama3 q8_0, "
        "blk.0.ffn_down), 0.028 (gemma2 q8_0) (2026-12-01, scripts/gpu_check_s5.sh calib) and "
        "0.162 (SmolLM2-135M Q4_1, 30 layers, decode 1 / blk.19.ffn_mul max; 17:25 UTC, "
        "traces/smollm2-h200.json) of the node's tolerance scale at rtol 1, so rtol 0.35 leaves "
        "2.2x; tensors: the largest error a node introduces (rel > 4x carried) on the NumPy "
        "backend's quant path vs its f32 path, --dump '.*', 'The kernel reads': 0.034 (SmolLM2, "
        "2 steps, prefill / blk.6.ffn_gate_up: the 8-bit codes of a normed row with outliers), "
        "0.0073 (demo, 4 steps), so tensor rtol 0.05 leaves 1.5x (2026-12-01)",
    ),
    # Two runs both on the quant path (GPU and the NumPy backend's ref_mmvq, which round every
    # group's term alike): a 1-ulp difference upstream flips an 8-bit code now and then, and
    # over many layers those flips drift as far as the quantization does (the logits rtol);
    # but where a node adds its own error (a wrong weight, a kernel bug) a flip's share is
    # small, so the tensors are held to the f16 path's tolerance.
    "quant-act-pair": PathTolerance(
        "quant-act-pair",
        rtol=0.35,
        atol=1e-5,
        tensor_rtol=2e-2,
        introduced_rtol=1e-4,
        how="two quant-path runs: logits and stats as quant-act-gpu (SmolLM2 GPU vs the NumPy "
        "backend's ref_mmvq drifts 0.14 of the scale); tensors as f16-gemm-gpu (2e-2), under "
        "which the demo's GPU and NumPy quant runs agree and a +0.1 bias weight is named at "
        "its node (tests/trace/test_tensors_gpu.py)",
    ),
}
#: Looser paths later: a pair of runs is judged by the looser one's tolerances.
_PATH_ORDER = ("f32-cpu", "f16-gemm-gpu", "quant-act-gpu")  # (quant-act-pair: both quant)


def run_path(trace: dict[str, Any]) -> str:
    """The numerical path of a trace's run (a key of :data:`PATHS`)."""
    run = trace["run"]
    # the quant path's decode matmuls (mmvq) take x quantized to 8 bits, on either backend;
    # traces of the quant path from before mmvq (f32 decode, matvec_*) are f16-GEMM-bound
    if run.get("matmul") in ("quant", "mmq") and _ran_mmvq(trace):
        return "quant-act-gpu"
    if run.get("backend") == "numpy":
        return "f32-cpu"
    return "f16-gemm-gpu"


def _ran_mmvq(trace: dict[str, Any]) -> bool:
    return any(
        str(rec.get("kernel", "")).startswith(("mmvq_", "numpy_mmvq_", "mmq_", "numpy_mmq_"))
        for step in trace.get("steps", ())
        for node in step.get("nodes", ())
        for rec in node.get("launches") or ()
    )


def calibrated(a: dict[str, Any], b: dict[str, Any]) -> PathTolerance:
    """The tolerances for comparing runs ``a`` and ``b``: the looser of their paths', or
    quant-act-pair when both ran the quant path: though both round every group's term alike (the NumPy backend's
    ref_mmvq and ref_mmq as mmvq and mmq), a 1-ulp difference upstream (a summation order)
    flips an 8-bit code now and then, and over many layers those steps drift as far as the
    quantization does from f32 (SmolLM2, 30 layers: 0.14 of the scale, PATHS' note)."""
    pa, pb = run_path(a), run_path(b)
    if pa == pb == "quant-act-gpu":
        return PATHS["quant-act-pair"]
    return PATHS[max(pa, pb, key=_PATH_ORDER.index)]


@dataclass
class Divergence:
    """The first place two traces disagree beyond the tolerance."""

    step: str
    node: str
    metric: str
    a: Any
    b: Any
    tolerance: float | None

    def text(self) -> str:
        tol = f" (tolerance {self.tolerance:.3g})" if self.tolerance is not None else ""
        return f"{self.step} / {self.node}: {self.metric} A={_fmt(self.a)} B={_fmt(self.b)}{tol}"


@dataclass
class NonFinite:
    """The first node whose output held a NaN/Inf in one trace, and how far it spread."""

    step: str
    node: str
    nan: int
    pos_inf: int
    neg_inf: int
    later_in_step: int
    nodes_after_in_step: int
    later_steps_affected: int

    def text(self) -> str:
        return (
            f"{self.step} / {self.node} (nan {self.nan}, +inf {self.pos_inf}, -inf {self.neg_inf}); "
            f"spread to {self.later_in_step} of the {self.nodes_after_in_step} later nodes of "
            f"that step and to {self.later_steps_affected} later step(s)"
        )


@dataclass
class Deviation:
    """The largest deviation seen (statistics: as a fraction of the tolerance it is judged by)."""

    step: str
    node: str
    metric: str
    a: Any
    b: Any
    tolerance: float
    fraction: float  # |a - b| / tolerance (> 1: beyond it)

    def text(self) -> str:
        return (
            f"{self.step} / {self.node}: {self.metric} A={_fmt(self.a)} B={_fmt(self.b)}, "
            f"|A - B| = {abs(self.a - self.b):.3g} = {self.fraction:.3g} x its tolerance "
            f"{self.tolerance:.3g}"
        )


@dataclass
class TensorDiff:
    """One node output in one step, compared element by element (both sides dumped)."""

    step: str
    node: str
    shape: list[int]
    max_abs: float
    rel: float  # max_abs / max(|a|max, |b|max)
    peak: list[int]  # the element where |a - b| peaks
    a_at_peak: float
    b_at_peak: float
    carried: float | None  # the largest rel among the inputs (None: an input not dumped)
    introduced: float  # the error this node adds (module docstring), relative to its scale
    tolerance: float  # what ``introduced`` (elementwise) or ``rel`` is judged against
    verdict: str  # "ok", "introduced", "carried", "unknown origin"

    def text(self) -> str:
        carried = "inputs not dumped" if self.carried is None else f"carried {self.carried:.3g}"
        return (
            f"{self.step} / {self.node}: rel {self.rel:.3g} (max |A - B| {self.max_abs:.3g} at "
            f"{self.peak}: A={self.a_at_peak:.7g} B={self.b_at_peak:.7g}); {carried}, "
            f"introduced {self.introduced:.3g} (tolerance {self.tolerance:.3g})"
        )


@dataclass
class TensorReport:
    """The tensor comparison of two dumped runs."""

    compared: int
    first_introduced: TensorDiff | None
    first_unknown: TensorDiff | None  # above tolerance with an input not dumped
    largest: TensorDiff | None
    above_tolerance: int
    logits_max_rel: float | None
    logits_step: str | None
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"tensors: compared {self.compared} dumped node outputs element by element"]
        out += [f"note: {n}" for n in self.notes]
        fi = self.first_introduced
        out.append("first node introducing error above tolerance: " + (fi.text() if fi else "none"))
        if self.first_unknown is not None and (
            fi is None or (self.first_unknown.step, self.first_unknown.node) != (fi.step, fi.node)
        ):
            out.append(f"first above tolerance, origin unknown: {self.first_unknown.text()}")
        if self.largest is not None:
            out.append(f"largest tensor deviation: {self.largest.text()}")
        out.append(f"node outputs above tolerance: {self.above_tolerance} of {self.compared}")
        if self.logits_max_rel is not None:
            out.append(f"saved logits: largest rel {self.logits_max_rel:.3g} ({self.logits_step})")
        return out

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        for k in ("first_introduced", "first_unknown", "largest"):
            d[k] = None if d[k] is None else d[k].__dict__
        return d


@dataclass
class DiffReport:
    """What :func:`diff_traces` found. ``diverged`` is True when a divergence was found."""

    rtol: float
    atol: float
    steps_compared: int
    nodes_compared: int
    node_records_compared: int
    first_divergence: Divergence | None
    first_token_mismatch: tuple[str, int, int] | None
    nonfinite_a: NonFinite | None
    nonfinite_b: NonFinite | None
    notes: list[str] = field(default_factory=list)
    path: PathTolerance | None = None
    largest: Deviation | None = None
    tensors: TensorReport | None = None

    @property
    def diverged(self) -> bool:
        t = self.tensors
        return (
            self.first_divergence is not None
            or self.first_token_mismatch is not None
            or (t is not None and (t.first_introduced is not None or t.first_unknown is not None))
        )

    def to_json(self) -> dict[str, Any]:
        def d(x: Any) -> Any:
            return None if x is None else x.__dict__

        return {
            "rtol": self.rtol,
            "atol": self.atol,
            "steps_compared": self.steps_compared,
            "nodes_compared": self.nodes_compared,
            "node_records_compared": self.node_records_compared,
            "first_divergence": d(self.first_divergence),
            "first_token_mismatch": self.first_token_mismatch,
            "nonfinite_a": d(self.nonfinite_a),
            "nonfinite_b": d(self.nonfinite_b),
            "notes": self.notes,
            "path": d(self.path),
            "largest_deviation": d(self.largest),
            "tensors": None if self.tensors is None else self.tensors.to_json(),
        }

    def text(self, name_a: str = "A", name_b: str = "B") -> str:
        lines = []
        if self.path is not None:
            lines.append(f"path: {self.path.name} (calibration: {self.path.how})")
        lines += [
            f"tolerance: |a - b| <= {self.atol:g} + {self.rtol:g} x max(absmax_a, absmax_b) on "
            "min/max/mean/std/absmax and heatmap cells (+ 8-bit code step); NaN/Inf counts exact",
            f"compared {self.node_records_compared} node records: {self.nodes_compared} nodes x "
            f"{self.steps_compared} step(s)",
        ]
        lines += [f"note: {n}" for n in self.notes]
        if self.first_divergence is None:
            lines.append("first divergence: none within tolerance")
        else:
            lines.append(f"first divergence: {self.first_divergence.text()}")
        if self.largest is not None:
            lines.append(f"largest deviation: {self.largest.text()}")
        elif self.node_records_compared:
            lines.append("largest deviation: none (the statistics are identical)")
        if self.tensors is not None:
            lines += self.tensors.lines()
        if self.first_token_mismatch is not None:
            s, ta, tb = self.first_token_mismatch
            lines.append(f"first chosen-token mismatch: {s}: {name_a} {ta} vs {name_b} {tb}")
        for label, nf in ((name_a, self.nonfinite_a), (name_b, self.nonfinite_b)):
            where = nf.text() if nf else "none"
            lines.append(f"first NaN/Inf in {label}: {where}")
        return "\n".join(lines)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def first_nonfinite_at(trace: Mapping[str, Any]) -> tuple[int, int] | None:
    """(step position, node id) of the first node, in execution order, whose output held a NaN
    or an Inf; None when every output was finite (or no statistics were kept).

    An ``add_rms_norm`` node is stood for by the first of its ``plane`` views that holds one:
    its output is the sum and the norm that the unfused graph's add and rms_norm nodes wrote,
    and the views carry those nodes' names, so an Inf that only the norm plane holds is named
    at the norm (``blk.1.attn_norm``), as in a trace of the unfused graph, not at
    ``blk.0.ffn_residual_norm``. Views without statistics leave the fused node named.
    """
    nodes = trace["nodes"]
    index = {n["name"]: n["id"] for n in nodes}
    views: dict[int, list[int]] = {}
    for n in nodes:
        if n["op"] == "plane" and n["inputs"] and n["inputs"][0] in index:
            views.setdefault(index[n["inputs"][0]], []).append(n["id"])
    for j, step in enumerate(trace["steps"]):
        recs = step["nodes"]
        for rec in recs:
            if _bad(rec.get("stats")):
                i = rec["id"]
                return j, next((v for v in views.get(i, []) if _bad(recs[v].get("stats"))), i)
    return None


def _first_nonfinite(trace: dict[str, Any]) -> NonFinite | None:
    at = first_nonfinite_at(trace)
    if at is None:
        return None
    j, i = at
    step = trace["steps"][j]
    s = step["nodes"][i]["stats"]
    later = step["nodes"][i + 1 :]
    return NonFinite(
        step=step["name"],
        node=trace["nodes"][i]["name"],
        nan=s["nan"],
        pos_inf=s["pos_inf"],
        neg_inf=s["neg_inf"],
        later_in_step=sum(1 for r in later if _bad(r.get("stats"))),
        nodes_after_in_step=len(later),
        later_steps_affected=sum(
            any(_bad(r.get("stats")) for r in st["nodes"]) for st in trace["steps"][j + 1 :]
        ),
    )


def _bad(s: dict[str, Any] | None) -> bool:
    return bool(s and (s["nan"] or s["pos_inf"] or s["neg_inf"]))


def _compare_stats(
    sa: dict[str, Any], sb: dict[str, Any], rtol: float, atol: float
) -> tuple[str, Any, Any, float | None] | None:
    for k in COUNT_KEYS:
        if sa[k] != sb[k]:
            return k, sa[k], sb[k], None
    if sa["count"] != sb["count"]:
        return "count", sa["count"], sb["count"], None
    scale = max(abs(sa["absmax"] or 0.0), abs(sb["absmax"] or 0.0))
    tol = atol + rtol * scale
    for k in STAT_KEYS:
        a, b = sa[k], sb[k]
        if (a is None) != (b is None):
            return k, a, b, tol
        if a is not None and abs(a - b) > tol:
            return k, a, b, tol
    ha, hb = sa.get("heatmap"), sb.get("heatmap")
    if ha and hb:
        if (ha["rows"], ha["cols"]) != (hb["rows"], hb["cols"]):
            return "heatmap grid", f"{ha['rows']}x{ha['cols']}", f"{hb['rows']}x{hb['cols']}", None
        ga, gb = decode_heatmap(ha), decode_heatmap(hb)
        na, nb = np.isnan(ga), np.isnan(gb)
        if (na != nb).any():
            r, c = np.argwhere(na != nb)[0]
            return f"heatmap cell [{r},{c}] NaN/Inf", bool(na[r, c]), bool(nb[r, c]), None
        step_a = ((ha["hi"] or 0.0) - (ha["lo"] or 0.0)) / 508
        step_b = ((hb["hi"] or 0.0) - (hb["lo"] or 0.0)) / 508
        htol = tol + step_a + step_b
        err = np.where(na, 0.0, np.abs(ga - gb))
        if err.size and err.max() > htol:
            r, c = np.unravel_index(int(np.argmax(err)), err.shape)
            return f"heatmap cell [{r},{c}]", float(ga[r, c]), float(gb[r, c]), htol
    return None


def _worst_stat(
    sa: dict[str, Any], sb: dict[str, Any], rtol: float, atol: float
) -> tuple[float, str, Any, Any, float] | None:
    """The statistic (or heatmap cell) of a node record deviating most as a fraction of its
    tolerance: (fraction, metric, a, b, tolerance); None if counts differ or nothing is finite."""
    if any(sa[k] != sb[k] for k in (*COUNT_KEYS, "count")):
        return None
    scale = max(abs(sa["absmax"] or 0.0), abs(sb["absmax"] or 0.0))
    tol = atol + rtol * scale
    if tol <= 0:
        return None
    best: tuple[float, str, Any, Any, float] | None = None
    for k in STAT_KEYS:
        x, y = sa[k], sb[k]
        if x is not None and y is not None and (best is None or abs(x - y) / tol > best[0]):
            best = (abs(x - y) / tol, k, x, y, tol)
    ha, hb = sa.get("heatmap"), sb.get("heatmap")
    if ha and hb and (ha["rows"], ha["cols"]) == (hb["rows"], hb["cols"]):
        ga, gb = decode_heatmap(ha), decode_heatmap(hb)
        htol = (
            tol
            + ((ha["hi"] or 0.0) - (ha["lo"] or 0.0) + (hb["hi"] or 0.0) - (hb["lo"] or 0.0)) / 508
        )
        ok = ~(np.isnan(ga) | np.isnan(gb))
        if ok.any():
            err = np.where(ok, np.abs(ga - gb), 0.0)
            r, c = np.unravel_index(int(np.argmax(err)), err.shape)
            if best is None or err[r, c] / htol > best[0]:
                best = (float(err[r, c] / htol), f"heatmap cell [{r},{c}]", float(ga[r, c]),
                        float(gb[r, c]), htol)  # fmt: skip
    return best


#: Elementwise ops, judged element by element (module docstring).
_ELEMENTWISE = (
    "add", "add_bias", "mul", "silu", "gelu_tanh", "scale", "glu", "slice_cols", "plane",
)  # fmt: skip


def _explained(op: str, attrs: dict[str, Any], ins: list[tuple[np.ndarray, np.ndarray]]) -> Any:
    """Per element, the largest |d out| an elementwise op's input differences can make; ``ins``
    holds (a, b) per data input (None where the input is a weight or step input: no error)."""
    d = [np.abs(x - y) if x is not None else 0.0 for x, y in ins]
    if op == "add":
        return d[0] + d[1]
    if op == "add_bias":
        return d[0]
    if op == "mul":
        (a0, b0), (a1, b1) = ins
        return (
            np.maximum(np.abs(a1), np.abs(b1)) * d[0]
            + np.maximum(np.abs(a0), np.abs(b0)) * d[1]
            + d[0] * d[1]
        )
    if op in ("silu", "gelu_tanh"):
        return 1.2 * d[0]  # |silu'| <= 1.1, |gelu_tanh'| <= 1.13
    if op == "scale":
        return abs(float(attrs.get("scale", 1.0))) * d[0]
    if op == "glu":  # act(g) u for x = [g | u]: as mul, with |act(g)| <= |g| and 1.2 |dg|
        (a, b), n = ins[0], ins[0][0].shape[-1] // 2
        ga, ua, gb, ub = a[..., :n], a[..., n:], b[..., :n], b[..., n:]
        dg, du = np.abs(ga - gb), np.abs(ua - ub)
        return (
            np.maximum(np.abs(ga), np.abs(gb)) * du
            + 1.2 * dg * np.maximum(np.abs(ua), np.abs(ub))
            + 1.2 * dg * du
        )
    if op == "slice_cols":  # a copy of some columns (of [nt, ...] flattened): adds nothing
        start, width = int(attrs["start"]), int(attrs["width"])
        return d[0].reshape(d[0].shape[0], -1)[:, start : start + width]
    if op == "plane":  # one plane of [planes, nt, e] (the sum or the norm of add_rms_norm)
        return d[0][int(attrs["plane"])]
    raise AssertionError(op)


def _compare_tensors(
    a: dict[str, Any],
    b: dict[str, Any],
    ta: dict[str, np.ndarray],
    tb: dict[str, np.ndarray],
    path: PathTolerance,
    tensor_rtol: float,
) -> TensorReport:
    from tracekit.trace.tensors import logits_key, step_key

    nodes = {n["name"]: n for n in a["nodes"]}
    order = [n["name"] for n in a["nodes"]]
    notes: list[str] = []
    first: TensorDiff | None = None
    unknown: TensorDiff | None = None
    largest: TensorDiff | None = None
    above = compared = 0
    rel_of: dict[tuple[int, str], float] = {}  # (step, node) -> rel, for carried
    f32_eps = 2.0**-23
    n_steps = min(len(a["steps"]), len(b["steps"]))
    for j in range(n_steps):
        sname = a["steps"][j]["name"]
        if a["steps"][j]["input_tokens"] != b["steps"][j]["input_tokens"]:
            notes.append(
                f"{sname}: the input tokens differ: tensors compared up to the step before"
            )
            break
        for name in order:
            key = step_key(j, name)
            if key not in ta or key not in tb:
                continue
            x = ta[key].astype(np.float64)
            y = tb[key].astype(np.float64)
            if x.shape != y.shape:
                notes.append(f"{sname} / {name}: shapes {list(x.shape)} vs {list(y.shape)}")
                continue
            compared += 1
            node = nodes[name]
            same = (x == y) | (np.isnan(x) & np.isnan(y))  # equal Infs, NaN against NaN
            diff = np.where(same, 0.0, np.abs(x - y))
            diff[np.isnan(diff)] = np.inf  # NaN against a number
            scale = max(float(np.abs(x[np.isfinite(x)]).max(initial=0.0)),
                        float(np.abs(y[np.isfinite(y)]).max(initial=0.0)))  # fmt: skip
            peak = np.unravel_index(int(np.argmax(diff)), diff.shape) if diff.size else ()
            max_abs = float(diff[peak]) if diff.size else 0.0
            rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
            rel_of[(j, name)] = rel
            ins = [i for i in node["inputs"] if not i.startswith("weight:")]
            carried: float | None = 0.0
            for i in ins:
                if i in ("tokens", "positions", "rows"):
                    continue
                r = rel_of.get((j, i))
                carried = None if r is None or carried is None else max(carried, r)
            if node["op"] == "attention" and carried is not None:
                for i in ins[1:]:  # K and V: what earlier steps left in the KV cache
                    for k in range(j):
                        r = rel_of.get((k, i))
                        carried = None if r is None else max(carried, r)
                        if carried is None:
                            break
            if node["op"] in _ELEMENTWISE and all(
                i in ("tokens", "positions", "rows") or (j, i) in rel_of for i in ins
            ):
                pairs = [
                    (ta[step_key(j, i)].astype(np.float64), tb[step_key(j, i)].astype(np.float64))
                    for i in ins
                ]
                if node["op"] == "add_bias":
                    pairs = pairs[:1]
                try:
                    bound = _explained(node["op"], node.get("attrs", {}), pairs)
                    if np.ndim(bound) and bound.shape != diff.shape and bound.size == diff.size:
                        bound = bound.reshape(diff.shape)  # a slice of heads: [nt, h, hd]
                    excess = diff - bound - f32_eps * 4 * np.maximum(np.abs(x), np.abs(y))
                    introduced = (
                        max(0.0, float(np.nanmax(excess, initial=0.0))) / scale
                        if scale > 0
                        else 0.0
                    )
                except ValueError:  # inputs that do not broadcast: judge as any other node
                    introduced = rel if carried is not None and rel > GROWTH * carried else 0.0
                tol = path.introduced_rtol
                bad_intro = introduced > tol
                bad = bad_intro or rel > tensor_rtol
            else:
                tol = tensor_rtol
                bad = rel > tol
                bad_intro = bad and carried is not None and rel > GROWTH * carried
                introduced = rel if bad_intro else 0.0
            verdict = "ok"
            if bad_intro:
                verdict = "introduced"
            elif bad:
                verdict = "unknown origin" if carried is None else "carried"
            td = TensorDiff(
                step=sname, node=name, shape=list(x.shape), max_abs=max_abs, rel=rel,
                peak=[int(p) for p in peak],
                a_at_peak=float(x[peak]) if x.size else 0.0,
                b_at_peak=float(y[peak]) if y.size else 0.0,
                carried=carried, introduced=introduced, tolerance=tol, verdict=verdict,
            )  # fmt: skip
            above += bad
            if bad_intro and first is None:
                first = td
            if verdict == "unknown origin" and unknown is None and first is None:
                unknown = td
            if largest is None or rel > largest.rel:
                largest = td
    logits_rel, logits_step = None, None
    for j in range(n_steps):
        k = logits_key(j)
        if k in ta and k in tb:
            x, y = ta[k].astype(np.float64), tb[k].astype(np.float64)
            scale = max(float(np.abs(x).max()), float(np.abs(y).max()), 1e-30)
            r = float(np.abs(x - y).max()) / scale
            if logits_rel is None or r > logits_rel:
                logits_rel, logits_step = r, a["steps"][j]["name"]
    if compared == 0:
        notes.append("no node output is dumped on both sides (record both with the same --dump)")
    return TensorReport(compared, first, unknown, largest, above, logits_rel, logits_step, notes)


def diff_traces(
    a: dict[str, Any],
    b: dict[str, Any],
    rtol: float | None = None,
    atol: float | None = None,
    tensors_a: dict[str, np.ndarray] | None = None,
    tensors_b: dict[str, np.ndarray] | None = None,
    tensor_rtol: float | None = None,
) -> DiffReport:
    """Compare two (loaded, valid) traces node by node over their common steps.

    Nodes are matched by name (traces of the same model share the topology); steps by index.

    Args:
        a, b: the traces.
        rtol, atol: the tolerance, as the module docstring states it; None: calibrated for the
            pair's path (:func:`calibrated`).
        tensors_a, tensors_b: the traces' sidecar tensors (:func:`~tracekit.trace.tensors.
            load_tensors`); with both, node outputs are compared exactly.
        tensor_rtol: the tensor tolerance of non-elementwise nodes; None: calibrated.

    Returns:
        A :class:`DiffReport`: the first divergence (step-major, in execution order), the first
        chosen-token mismatch, and per trace the first node with a NaN/Inf and its spread.
    """
    path = calibrated(a, b)
    given = rtol is not None
    rtol = path.rtol if rtol is None else rtol
    atol = path.atol if atol is None else atol
    if rtol is None:
        raise ValueError(
            f"no calibrated tolerance for the {path.name} path yet: give rtol (--rtol)"
        )
    if rtol < 0 or atol < 0 or (tensor_rtol is not None and tensor_rtol < 0):
        raise ValueError(f"tolerances must be non-negative, got rtol={rtol}, atol={atol}")
    notes: list[str] = []
    if given:
        notes.append(f"tolerance given by the caller (the {path.name} path's calibrated rtol is "
                     f"{path.rtol})")  # fmt: skip
    if a["model"]["name"] != b["model"]["name"]:
        notes.append(f"different models: {a['model']['name']!r} vs {b['model']['name']!r}")
    names_b = {n["name"]: n["id"] for n in b["nodes"]}
    common = [(n["id"], names_b[n["name"]], n["name"]) for n in a["nodes"] if n["name"] in names_b]
    only_a = len(a["nodes"]) - len(common)
    only_b = len(b["nodes"]) - len(common)
    if only_a or only_b:
        notes.append(f"topologies differ: {only_a} node(s) only in A, {only_b} only in B")
    n_steps = min(len(a["steps"]), len(b["steps"]))
    if len(a["steps"]) != len(b["steps"]):
        notes.append(f"A has {len(a['steps'])} steps, B {len(b['steps'])}: comparing {n_steps}")
    if any(s["nodes"][0].get("stats") is None for s in a["steps"][:1] if s["nodes"]):
        notes.append("A holds no statistics (timing capture): only tokens compared")
    if any(s["nodes"][0].get("stats") is None for s in b["steps"][:1] if s["nodes"]):
        notes.append("B holds no statistics (timing capture): only tokens compared")
    first: Divergence | None = None
    token_mismatch: tuple[str, int, int] | None = None
    largest: Deviation | None = None
    compared = 0
    stop = False  # the input tokens differ: no later step is comparable
    for j in range(n_steps):
        sa, sb = a["steps"][j], b["steps"][j]
        if sa["input_tokens"] != sb["input_tokens"] and first is None:
            first = Divergence(
                sa["name"],
                "(step input)",
                "input tokens",
                sa["input_tokens"],
                sb["input_tokens"],
                None,
            )
        ca, cb = sa["logits"]["chosen"]["id"], sb["logits"]["chosen"]["id"]
        if ca != cb and token_mismatch is None:
            token_mismatch = (sa["name"], ca, cb)
        if first is not None and first.node == "(step input)":
            stop = True
        if stop:
            continue
        for ia, ib, name in common:
            ra, rb = sa["nodes"][ia], sb["nodes"][ib]
            if ra["shape"] != rb["shape"]:
                if first is None:
                    first = Divergence(sa["name"], name, "shape", ra["shape"], rb["shape"], None)
                continue
            st_a, st_b = ra.get("stats"), rb.get("stats")
            if not st_a or not st_b:
                continue
            compared += 1
            if first is None:
                bad = _compare_stats(st_a, st_b, rtol, atol)
                if bad is not None:
                    first = Divergence(sa["name"], name, *bad)
            w = _worst_stat(st_a, st_b, rtol, atol)
            if w is not None and w[0] > 0 and (largest is None or w[0] > largest.fraction):
                largest = Deviation(sa["name"], name, w[1], w[2], w[3], w[4], w[0])
    tensors = None
    if tensors_a is not None and tensors_b is not None:
        trtol = path.tensor_rtol if tensor_rtol is None else tensor_rtol
        if trtol is None:
            raise ValueError(
                f"no calibrated tensor tolerance for the {path.name} path yet: give "
                "tensor_rtol (--tensor-rtol)"
            )
        tensors = _compare_tensors(a, b, tensors_a, tensors_b, path, trtol)
    elif (tensors_a is None) != (tensors_b is None):
        notes.append(f"only {'A' if tensors_a is not None else 'B'} has tensor dumps: "
                     "statistics compared")  # fmt: skip
    return DiffReport(
        rtol=rtol,
        atol=atol,
        steps_compared=n_steps,
        nodes_compared=len(common),
        node_records_compared=compared,
        first_divergence=first,
        first_token_mismatch=token_mismatch,
        nonfinite_a=_first_nonfinite(a),
        nonfinite_b=_first_nonfinite(b),
        notes=notes,
        path=path,
        largest=largest,
        tensors=tensors,
    )
