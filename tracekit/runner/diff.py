"""Node-by-node comparison of two traces of the same model (GPU vs CPU, two capture modes, …).

Tolerance: a statistic (min, max, mean, std, absmax) of a node's output differs when
``|a - b| > atol + rtol * scale``, with ``scale`` the larger absmax of the two outputs: the
error is judged against the tensor's magnitude, so a mean near zero with a large spread is not
flagged for a rounding-sized difference. Heatmap cells get the same tolerance plus each side's
quantisation step ((hi - lo) / 508: codes are 8-bit), and the NaN/Inf cell pattern must match.
The NaN, +Inf and -Inf counts must be equal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracekit.kernels.stats import decode_heatmap

STAT_KEYS = ("min", "max", "mean", "std", "absmax")
COUNT_KEYS = ("nan", "pos_inf", "neg_inf")


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

    @property
    def diverged(self) -> bool:
        return self.first_divergence is not None or self.first_token_mismatch is not None

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
        }

    def text(self, name_a: str = "A", name_b: str = "B") -> str:
        lines = [
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


def _first_nonfinite(trace: dict[str, Any]) -> NonFinite | None:
    nodes = trace["nodes"]
    for j, step in enumerate(trace["steps"]):
        for i, rec in enumerate(step["nodes"]):
            s = rec.get("stats")
            if not s or not _bad(s):
                continue
            later = step["nodes"][i + 1 :]
            later_steps = sum(
                any(r.get("stats") and _bad(r["stats"]) for r in st["nodes"])
                for st in trace["steps"][j + 1 :]
            )
            return NonFinite(
                step=step["name"],
                node=nodes[rec["id"]]["name"],
                nan=s["nan"],
                pos_inf=s["pos_inf"],
                neg_inf=s["neg_inf"],
                later_in_step=sum(1 for r in later if r.get("stats") and _bad(r["stats"])),
                nodes_after_in_step=len(later),
                later_steps_affected=later_steps,
            )
    return None


def _bad(s: dict[str, Any]) -> bool:
    return bool(s["nan"] or s["pos_inf"] or s["neg_inf"])


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


def diff_traces(
    a: dict[str, Any], b: dict[str, Any], rtol: float = 1e-3, atol: float = 1e-5
) -> DiffReport:
    """Compare two (loaded, valid) traces node by node over their common steps.

    Nodes are matched by name (traces of the same model share the topology); steps by index.

    Args:
        a, b: the traces.
        rtol, atol: the tolerance, as the module docstring states it.

    Returns:
        A :class:`DiffReport`: the first divergence (step-major, in execution order), the first
        chosen-token mismatch, and per trace the first node with a NaN/Inf and its spread.
    """
    if rtol < 0 or atol < 0:
        raise ValueError(f"tolerances must be non-negative, got rtol={rtol}, atol={atol}")
    notes: list[str] = []
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
    compared = 0
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
        if first is not None:
            continue
        for ia, ib, name in common:
            ra, rb = sa["nodes"][ia], sb["nodes"][ib]
            if ra["shape"] != rb["shape"]:
                first = Divergence(sa["name"], name, "shape", ra["shape"], rb["shape"], None)
                break
            st_a, st_b = ra.get("stats"), rb.get("stats")
            if not st_a or not st_b:
                continue
            compared += 1
            bad = _compare_stats(st_a, st_b, rtol, atol)
            if bad is not None:
                first = Divergence(sa["name"], name, *bad)
                break
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
    )
