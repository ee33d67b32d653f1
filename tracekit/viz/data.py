"""Trace -> the tables and derived numbers the dashboard shows (no plotly, no Dash here).

Everything takes the trace dict that :func:`tracekit.trace.format.load_trace` returns
(docs/trace-format.md) and a step *position* ``j`` (``trace["steps"][j]``: 0 = prefill,
k = decode k). Node ids index ``trace["nodes"]`` and every ``step["nodes"]`` alike.

The load phase (``trace["load"]``: the w16 cache's warm-up, one dequant node per weight) is
step position :data:`LOAD` in the dashboard. :func:`load_view` shapes it as a one-step trace
of its own, so every builder here and in :mod:`tracekit.viz.figures` shows it as ``(view, 0)``;
the app's node store holds *global* ids (graph nodes ``0..N-1``, load nodes ``N..N+L-1``) and
:func:`resolve_node` turns one into the id of the step shown.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracekit.kernels.ceilings import bandwidth_ceiling
from tracekit.kernels.matmul import PATHS
from tracekit.kernels.stats import decode_heatmap
from tracekit.trace.diff import first_nonfinite_at
from tracekit.trace.perf import (
    MODE_AGREEMENT,
    alternating_mode_ratios,
    replayed_node_times,
    step_launch_mode,
)

Trace = Mapping[str, Any]

#: Measures the graph view can colour by: key -> label (with unit).
MEASURES: dict[str, str] = {
    "time": "GPU time (µs)",  # "CPU time (µs)" for NumPy traces: measure_label()
    "fraction": "% of ceiling",
    "bound": "bound class",
    "absmax": "absmax",
    "nonfinite": "NaN/Inf count",
    "path": "matmul path",
}
BOUND_CLASSES: tuple[str, ...] = ("launch", "bandwidth", "compute")
#: Tolerance of the compare view, the same rule as ``tracekit diff`` (tracekit/trace/diff.py):
#: a node diverges when a statistic or a heatmap cell differs by more than
#: ATOL + RTOL x max(absmax_a, absmax_b) (heatmap cells also get each side's 8-bit code step),
#: or when its NaN/Inf counts differ.
RTOL = 1e-3
ATOL = 1e-5


# -- formatting (decimal units, as bandwidths are quoted) ------------------------------------
def fmt_time(s: float | None) -> str:
    if s is None:
        return "—"
    if s >= 1.0:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} µs"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "—"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def fmt_rate(x: float | None, unit: str) -> str:
    if x is None:
        return "—"
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def fmt_num(v: float | int | None) -> str:
    if v is None:
        return "—"
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:.5g}"


def fmt_pct(frac: float | None) -> str:
    return "—" if frac is None else f"{100 * frac:.3g}%"


def time_label(trace: Trace) -> str:
    """ "CPU time" for a NumPy trace, else "GPU time" (tracekit.trace.perf.time_label)."""
    from tracekit.trace.perf import time_label as label

    return label(trace.get("run", {}).get("backend"))


def measure_label(trace: Trace, measure: str) -> str:
    """A :data:`MEASURES` label with the trace's kind of time."""
    if measure == "time":
        return f"{time_label(trace)} (µs)"
    return MEASURES[measure]


def fmt_efficiency(p: Mapping[str, Any]) -> str:
    """A node's efficiency as shown: never above 100%; a flagged one says so."""
    if p.get("flag"):
        return f"flagged ({100 * p['efficiency']:.3g}% measured: impossible)"
    return fmt_pct(p["fraction_of_ceiling"])


# -- nodes and layout ------------------------------------------------------------------------
def node_kind(node: Mapping[str, Any]) -> str:
    """``blk.3.ffn_up`` -> ``ffn_up``: the column of a layer node in the graph view."""
    name, layer = node["name"], node["layer"]
    prefix = f"blk.{layer}."
    return name[len(prefix) :] if layer is not None and name.startswith(prefix) else name


@dataclass(frozen=True)
class GridLayout:
    """Where each node sits in the graph view: one row per layer, one column per node kind.

    Nodes outside any layer sit in an ``input`` row (before the first layer node in execution
    order) or an ``output`` row (after), left to right in execution order.
    """

    rows: tuple[str, ...]
    cols: tuple[str, ...]
    cell: dict[int, tuple[int, int]]  # node id -> (row, col)
    at: dict[tuple[int, int], int]  # (row, col) -> node id

    def node_at(self, row: int, col: int) -> int | None:
        return self.at.get((row, col))


def grid_layout(nodes: Sequence[Mapping[str, Any]]) -> GridLayout:
    """Lay the topology out by layer (rows) and node kind (columns)."""
    layers = sorted({n["layer"] for n in nodes if n["layer"] is not None})
    first_layer = next((i for i, n in enumerate(nodes) if n["layer"] is not None), len(nodes))
    kinds: list[str] = []
    for n in nodes:
        if n["layer"] is not None and node_kind(n) not in kinds:
            kinds.append(node_kind(n))
    inputs = [i for i, n in enumerate(nodes) if n["layer"] is None and i < first_layer]
    outputs = [i for i, n in enumerate(nodes) if n["layer"] is None and i > first_layer]
    rows = (["input"] if inputs else []) + [f"blk.{L}" for L in layers]
    rows += ["output"] if outputs else []
    row_of = {f"blk.{L}": r for r, L in enumerate(layers, start=1 if inputs else 0)}
    ncols = max(len(kinds), len(inputs), len(outputs), 1)
    cols = kinds + [""] * (ncols - len(kinds))
    cell: dict[int, tuple[int, int]] = {}
    for c, i in enumerate(inputs):
        cell[i] = (0, c)
    for c, i in enumerate(outputs):
        cell[i] = (len(rows) - 1, c)
    taken: set[tuple[int, int]] = set(cell.values())
    for i, n in enumerate(nodes):
        if n["layer"] is None:
            continue
        rc = (row_of[f"blk.{n['layer']}"], kinds.index(node_kind(n)))
        if rc in taken:  # two nodes of one kind in a layer: give the second its own column
            cols.append(f"{node_kind(n)} ({i})")
            rc = (rc[0], len(cols) - 1)
        cell[i] = rc
        taken.add(rc)
    return GridLayout(tuple(rows), tuple(cols), cell, {rc: i for i, rc in cell.items()})


def input_ids(trace: Trace, node_id: int) -> list[int]:
    """Ids of the graph nodes ``node_id`` reads (weights excluded), in input order."""
    by_name = {n["name"]: n["id"] for n in trace["nodes"]}
    return [by_name[x] for x in trace["nodes"][node_id]["inputs"] if x in by_name]


def other_inputs(trace: Trace, node_id: int) -> list[str]:
    """Inputs that are neither graph nodes nor weights: the step's ``tokens``, ``positions``…"""
    names = {n["name"] for n in trace["nodes"]}
    return [
        x
        for x in trace["nodes"][node_id]["inputs"]
        if x not in names and not x.startswith("weight:")
    ]


def weight_inputs(trace: Trace, node_id: int) -> list[str]:
    """Names of the weights ``node_id`` reads (``weight:<tensor>`` inputs, prefix dropped)."""
    return [x[7:] for x in trace["nodes"][node_id]["inputs"] if x.startswith("weight:")]


def consumer_ids(trace: Trace, node_id: int) -> list[int]:
    """Ids of the nodes that read ``node_id``'s output, in execution order."""
    name = trace["nodes"][node_id]["name"]
    return [n["id"] for n in trace["nodes"] if name in n["inputs"]]


# -- per-step values -------------------------------------------------------------------------
def nonfinite(stats: Mapping[str, Any] | None) -> int | None:
    if stats is None:
        return None
    return int(stats["nan"]) + int(stats["pos_inf"]) + int(stats["neg_inf"])


def measure_values(trace: Trace, j: int, measure: str) -> np.ndarray:
    """One float per node of step ``j`` for ``measure`` (a :data:`MEASURES` key); NaN = none.

    ``time`` is in µs, ``fraction`` in %, ``bound`` is the index into :data:`BOUND_CLASSES`,
    ``path`` the index into :data:`tracekit.kernels.matmul.PATHS`.
    """
    if measure not in MEASURES:
        raise ValueError(f"measure {measure!r} is not one of {', '.join(MEASURES)}")
    out = np.full(len(trace["nodes"]), np.nan)
    for i, rec in enumerate(trace["steps"][j]["nodes"]):
        perf, stats = rec["perf"], rec["stats"]
        v: float | None
        if measure == "time":
            v = rec["time_s"] * 1e6
        elif measure == "fraction":
            f = perf["fraction_of_ceiling"]
            v = None if f is None else 100 * f
        elif measure == "bound":
            b = perf["bound"]
            v = None if b is None else BOUND_CLASSES.index(b)
        elif measure == "absmax":
            v = None if stats is None else stats["absmax"]
        elif measure == "path":
            # the index into PATHS; a node whose launches name two paths takes the first
            named = [x for x in launch_paths(rec) if x in PATHS]
            v = PATHS.index(named[0]) if named else None
        else:
            v = nonfinite(stats)
        out[i] = np.nan if v is None else v
    return out


def has_stats(trace: Trace) -> bool:
    return any(r["stats"] is not None for s in trace["steps"] for r in s["nodes"])


def first_nonfinite(trace: Trace) -> tuple[int, int] | None:
    """(step position, node id) of the first node, in execution order, whose output held a NaN
    or an Inf; None when every output was finite (or no statistics were kept). The node that
    ``tracekit diff`` names (:func:`tracekit.trace.diff.first_nonfinite_at`: a fused
    add_rms_norm is named by its plane view that holds them)."""
    return first_nonfinite_at(trace)


def heatmap_grid(stats: Mapping[str, Any] | None) -> np.ndarray | None:
    """The decoded [rows, cols] value grid of a node's heatmap (NaN = non-finite cell)."""
    if stats is None or stats.get("heatmap") is None:
        return None
    hm = stats["heatmap"]
    if hm["rows"] * hm["cols"] == 0:
        return None
    return decode_heatmap(hm)


def launch_rows(rec: Mapping[str, Any], backend: str = "cupy") -> list[dict[str, str]]:
    """The node's launches as table rows (grid, block, threads working of launched, bytes).

    A launch without a grid is a host call on the NumPy backend, or a library call (cuBLAS)
    on the GPU, whose geometry tracekit does not choose.
    """
    nogrid = "host (NumPy)" if backend == "numpy" else "library call"
    out = []
    for la in rec["launches"]:
        tl, tw = la["threads_launched"], la["threads_working"]
        out.append(
            {
                "kernel": la["kernel"],
                "grid": nogrid if la["grid"] is None else "×".join(map(str, la["grid"])),
                "block": "—" if la["block"] is None else "×".join(map(str, la["block"])),
                "threads": f"{tw:,} of {tl:,} ({100 * tw / tl:.3g}%)" if tl else "—",
                "read": fmt_bytes(la["bytes_read"]),
                "written": fmt_bytes(la["bytes_written"]),
                "flops": fmt_num(int(la["flops"])),
                "path": str((la.get("extra") or {}).get("path", "—")),
                "notes": launch_notes(la),
                # its own device time where the trace timed each launch (v2, stamps.py)
                "time": fmt_time(la["time_s"]) if la.get("time_s") is not None else "—",
            }
        )
    return out


def launch_notes(la: Mapping[str, Any]) -> str:
    """What a launch record's extras say about how the kernel ran: a bias added in its
    epilogue, attention's key splits (split-K), its dynamic shared memory, mmvq_st's stages
    (tiles in flight, rows a tile, rows a warp walks together, blocks an SM, x held in
    registers); "—" for none."""
    extra = la.get("extra") or {}
    notes = []
    if extra.get("epilogue"):
        notes.append(f"{extra['epilogue']} in the epilogue")
    if int(extra.get("splits") or 1) > 1:
        notes.append(f"keys split over {int(extra['splits'])} blocks")
    if extra.get("shared_bytes"):
        notes.append(f"{fmt_bytes(int(extra['shared_bytes']))} dynamic shared")
    if extra.get("stages") and extra.get("rows_per_tile"):
        notes.append(f"{int(extra['stages'])} stages of {int(extra['rows_per_tile'])} rows")
    if int(extra.get("rows_per_warp") or 1) > 1:
        notes.append(f"{int(extra['rows_per_warp'])} rows a warp")
    if extra.get("blocks_per_sm"):
        notes.append(f"{int(extra['blocks_per_sm'])} blocks an SM")
    if extra.get("x_held"):
        notes.append(f"x held in registers ({int(extra['x_held'])} a lane)")
    return "; ".join(notes) or "—"


def launch_paths(rec: Mapping[str, Any]) -> list[str]:
    """The matmul paths a node record's launches name (``extra.path``), in launch order."""
    paths = ((la.get("extra") or {}).get("path") for la in rec["launches"])
    return list(dict.fromkeys(str(x) for x in paths if x is not None))


def node_path(rec: Mapping[str, Any]) -> str | None:
    """The matmul path a node's launches ran on (``extra.path``: quant, f16-per-call,
    f16-cached, f32), or None for a node that names none (not a matmul, or an older trace)."""
    paths = launch_paths(rec)
    return ", ".join(paths) if paths else None


def paths_by_step(trace: Trace, node_id: int) -> str | None:
    """The matmul path(s) of a graph node over the whole trace, naming the steps where it
    changes (a long prefill runs ``f16-per-call`` where decode runs ``quant``): ``quant``, or
    ``f16-per-call (prefill), quant (decode)``; None for a node that names no path."""
    by_kind: dict[str, list[str]] = {}
    for step in trace["steps"]:
        for x in launch_paths(step["nodes"][node_id]):
            kinds = by_kind.setdefault(x, [])
            if step["kind"] not in kinds:
                kinds.append(step["kind"])
    if not by_kind:
        return None
    if len(by_kind) == 1:
        return next(iter(by_kind))
    return ", ".join(f"{x} ({', '.join(k)})" for x, k in by_kind.items())


def perf_rows(trace: Trace, rec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, value) pairs of a node's performance annotation, units included."""
    p, c = rec["perf"], trace["ceilings"]
    bw, bw_stream = bandwidth_ceiling(c)  # the bound model's (trace/perf.py)
    read = sum(la["bytes_read"] for la in rec["launches"])
    written = sum(la["bytes_written"] for la in rec["launches"])
    host, full_host = rec.get("host_s"), rec.get("full_host_s")
    label = time_label(trace)
    if trace.get("load_view"):  # timed once, at load: no passes, no capture
        rows = [(f"{label} (dequant at load)", fmt_time(rec["time_s"]))]
    else:
        rows = [
            (f"{label} (timing pass)", fmt_time(rec["time_s"])),
            ("time in the full pass", fmt_time(rec.get("full_time_s"))),
            ("host time, timing / full pass", f"{fmt_time(host)} / {fmt_time(full_host)}"),
            (
                "capture cost",
                "—" if rec["capture_cost"] is None else f"{rec['capture_cost']:.3g}× host time",
            ),
        ]
    rows += [
        ("bytes read / written", f"{fmt_bytes(read)} / {fmt_bytes(written)}"),
        ("flops", fmt_num(int(p["flops"]))),
        ("intensity", "—" if p["intensity"] is None else f"{p['intensity']:.3g} flop/B"),
        (
            "achieved bandwidth",
            f"{fmt_rate(p['achieved_Bps'], 'B/s')} of {fmt_rate(bw, 'B/s')} ({bw_stream})",
        ),
        (
            "achieved compute",
            f"{fmt_rate(p['achieved_flops'], 'flop/s')} of {fmt_rate(c['peak_flops'], 'flop/s')}",
        ),
        ("bound T*", fmt_time(p.get("t_star_s"))),
        ("efficiency (T* / time)", fmt_efficiency(p)),
    ]
    if not trace.get("load_view"):
        rows.append(("host wait before it", fmt_time(rec.get("host_wait_s"))))
    if p.get("flag"):
        rows.append(("flag", p["flag"]))
    ncu = rec.get("ncu")
    if ncu:
        rows.append(("ncu DRAM bytes (measured)", fmt_bytes(ncu.get("measured_bytes"))))
        rows.append(("ncu kernel time", fmt_time(ncu.get("gpu_time_s"))))
    return rows


def stats_rows(stats: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    if stats is None:
        return []
    keys = ("count", "min", "max", "mean", "std", "absmax", "nan", "pos_inf", "neg_inf", "zeros")
    return [(k.replace("_", " "), fmt_num(stats[k])) for k in keys]


# -- the load phase (the w16 cache's warm-up) ------------------------------------------------
#: The step position of the load phase: before the prefill (position 0).
LOAD = -1
_LAYER_OF = re.compile(r"blk\.(\d+)\.")


def has_load(trace: Trace) -> bool:
    return bool((trace.get("load") or {}).get("nodes"))


def first_step(trace: Trace) -> int:
    """The first step position the dashboard shows: :data:`LOAD` when the trace has one."""
    return LOAD if has_load(trace) else 0


def load_view(trace: Trace) -> dict[str, Any]:
    """The load phase as a trace of one step (``steps[0]``, named ``load``) whose nodes are
    the load nodes, one per weight dequantized into the w16 cache: name = the weight's tensor
    name, op ``dequant``, family ``dequant``, layer from ``blk.N.``, the weight as its input;
    records as a step's (``stats`` null: nothing was kept of their outputs). Their times were
    taken one by one, so they carry no device intervals and the timeline lays them end to end.

    Raises:
        ValueError: the trace has no load phase.
    """
    if not has_load(trace):
        raise ValueError("the trace has no load phase (recorded without a warmed w16 cache)")
    load = trace["load"]
    nodes, recs = [], []
    for k, n in enumerate(load["nodes"]):
        m = _LAYER_OF.match(n["weight"])
        nodes.append(
            {
                "id": k,
                "name": n["weight"],
                "op": "dequant",
                "family": "dequant",
                "layer": int(m.group(1)) if m else None,
                "inputs": [f"weight:{n['weight']}"],
                "attrs": {},
                "weight_type": n["weight_type"],
                "shape": list(n["shape"]),
                "dtype": "float16",
            }
        )
        recs.append(
            {
                "id": k,
                "shape": list(n["shape"]),
                "dtype": "float16",
                "time_s": n["time_s"],
                "capture_cost": None,
                "launches": n["launches"],
                "perf": n["perf"],
                "stats": None,
            }
        )
    step = {
        "index": LOAD,
        "kind": "load",
        "name": "load",
        "n_tokens": 0,
        "n_past": 0,
        "wall_s": load["seconds"],
        "gpu_s": sum(r["time_s"] for r in recs),
        "nodes": recs,
        "logits": None,
    }
    return {**trace, "nodes": nodes, "steps": [step], "load_view": True}


def weight_consumers(trace: Trace, weight: str) -> list[int]:
    """Ids of the graph nodes that read ``weight`` (a tensor name), in execution order."""
    return [n["id"] for n in trace["nodes"] if f"weight:{weight}" in n["inputs"]]


def load_node_of(trace: Trace, node_id: int) -> int | None:
    """The load-view id of the first weight graph node ``node_id`` reads that the load phase
    dequantized, or None."""
    if not has_load(trace):
        return None
    where = {n["weight"]: k for k, n in enumerate(trace["load"]["nodes"])}
    return next((where[w] for w in weight_inputs(trace, node_id) if w in where), None)


def _slowest(recs: Sequence[Mapping[str, Any]]) -> int:
    return max(range(len(recs)), key=lambda i: recs[i]["time_s"])


def resolve_node(trace: Trace, j: int, node: int) -> int:
    """The id, in the nodes of step position ``j`` (the load view's at :data:`LOAD`), of the
    dashboard's selection ``node``, a global id (graph nodes ``0..N-1``, load nodes ``N..``).

    A load node shown at a step is the first graph node reading its weight; a graph node shown
    at the load phase is the load node of its weight. Where there is none (or the id is out of
    range), the slowest node of the step shown.
    """
    n = len(trace["nodes"])
    loads = trace["load"]["nodes"] if has_load(trace) else []
    if j == LOAD:
        if n <= node < n + len(loads):
            return node - n
        k = load_node_of(trace, node) if 0 <= node < n else None
        return k if k is not None else _slowest(loads)
    if 0 <= node < n:
        return node
    if n <= node < n + len(loads):
        readers = weight_consumers(trace, loads[node - n]["weight"])
        if readers:
            return readers[0]
    return _slowest(trace["steps"][j]["nodes"])


def global_node(trace: Trace, j: int, local: int) -> int:
    """The dashboard's (global) id of node ``local`` of step position ``j``."""
    return local + len(trace["nodes"]) if j == LOAD else local


def view(trace: Trace, j: int, lv: Trace | None = None) -> tuple[Trace, int]:
    """(the trace to draw, its step position) for the dashboard's step ``j``: the load view
    (``lv`` when given, else built) and 0 for :data:`LOAD`, else ``trace`` and ``j``."""
    if j == LOAD:
        return (lv if lv is not None else load_view(trace)), 0
    return trace, j


def load_summary(trace: Trace) -> str | None:
    """One line on the load phase, or None without one: weights, bytes, kernel time, the
    whole preparation's host time."""
    if not has_load(trace):
        return None
    ns = trace["load"]["nodes"]
    t = sum(n["time_s"] for n in ns)
    moved = sum(la["bytes_read"] + la["bytes_written"] for n in ns for la in n["launches"])
    return (
        f"{len(ns)} weights dequantized into the w16 cache: kernel time {fmt_time(t)} "
        f"({time_label(trace)}) moving {fmt_bytes(moved)} "
        f"({fmt_rate(moved / t if t > 0 else None, 'B/s')}), "
        f"{fmt_time(trace['load']['seconds'])} of weight preparation in all (host clock)"
    )


# -- what a step's times sum ---------------------------------------------------------------
def step_times(trace: Trace, j: int) -> dict[str, Any]:
    """What the step's time labels sum, in seconds (None where the trace holds no intervals):

    - ``kernel_s``: the node times summed, each the sum of its launches' own device times
      (= the step's ``gpu_s``; the breakdown's ``kernel_s``);
    - ``bars_s``: the timeline's node bars summed, each from its first launch's start to its
      last launch's end (v2), so ``bars_s - kernel_s`` = ``inside_s``, the gaps between a
      node's own launches (a stamp kernel, a host wait before a library call);
    - ``span_s``, ``host_wait_s``, ``other_gap_s``: the step's device span and its idle
      parts (:mod:`tracekit.trace.timeline`): span = kernel time + host wait + other gaps,
      the gaps inside nodes included.
    """
    recs = trace["steps"][j]["nodes"]
    kernel = sum(r["time_s"] for r in recs)
    timed = bool(recs) and all("start_ns" in r and "end_ns" in r for r in recs)
    bars = sum(r["end_ns"] - r["start_ns"] for r in recs) * 1e-9 if timed else kernel
    b = trace["steps"][j].get("breakdown") or {}
    return {
        "kernel_s": kernel,
        "bars_s": bars,
        "inside_s": max(bars - kernel, 0.0) if timed else None,
        "span_s": b.get("span_s"),
        "host_wait_s": b.get("host_wait_s"),
        "other_gap_s": b.get("other_gap_s"),
    }


def device_word(trace: Trace) -> str:
    """``GPU`` or ``CPU``: whose clock a trace's times are on."""
    return time_label(trace).split()[0]


def step_info(trace: Trace, j: int) -> str:
    """The dashboard's step line: what the step ran, its kernel time of its device span and
    where the rest of the span went, its wall time."""
    s, t = trace["steps"][j], step_times(trace, j)
    dev = device_word(trace)
    if s["kind"] == "load":
        what = f"load · w16 cache warm-up, {len(s['nodes'])} weights"
        wall = f"weight preparation {fmt_time(s['wall_s'])} (host clock)"
    else:
        # how its kernels were launched: an alternating run's steps differ (run.alternate_modes)
        mode = step_launch_mode(trace, s)
        what = f"{s['name']} ({mode}) · {s['n_tokens']} token(s) after {s['n_past']}"
        wall = f"wall {fmt_time(s['wall_s'])}"
    kern = f"kernel time {fmt_time(t['kernel_s'])}"
    if t["span_s"] is None:
        return f"{what} · {kern} ({dev}) · {wall}"
    return (
        f"{what} · {kern} of a {fmt_time(t['span_s'])} {dev} span "
        f"(host wait {fmt_time(t['host_wait_s'])}, other gaps {fmt_time(t['other_gap_s'])}) "
        f"· {wall}"
    )


# -- overview --------------------------------------------------------------------------------
def families(trace: Trace) -> list[str]:
    """Kernel families in order of first appearance."""
    return list(dict.fromkeys(n["family"] for n in trace["nodes"]))


def family_times(trace: Trace) -> dict[str, list[float]]:
    """family -> node time summed per step (seconds), one entry per step."""
    fam = [n["family"] for n in trace["nodes"]]
    out = {f: [0.0] * len(trace["steps"]) for f in families(trace)}
    for j, step in enumerate(trace["steps"]):
        for rec in step["nodes"]:
            out[fam[rec["id"]]][j] += rec["time_s"]
    return out


def slowest_nodes(trace: Trace, n: int = 10) -> list[dict[str, Any]]:
    """The ``n`` nodes with the largest time over all steps: id, name, family, prefill time,
    mean decode time, total (seconds) and share of the whole trace's node time."""
    steps = trace["steps"]
    total = np.zeros(len(trace["nodes"]))
    for step in steps:
        total += [r["time_s"] for r in step["nodes"]]
    grand = float(total.sum()) or 1.0
    decode = [s for s in steps if s["kind"] == "decode"]
    rows = []
    for i in np.argsort(-total, kind="stable")[:n]:
        i = int(i)
        node = trace["nodes"][i]
        mean_dec = sum(s["nodes"][i]["time_s"] for s in decode) / len(decode) if decode else None
        rows.append(
            {
                "id": i,
                "name": node["name"],
                "family": node["family"],
                "prefill_s": steps[0]["nodes"][i]["time_s"] if steps else None,
                "decode_mean_s": mean_dec,
                "total_s": float(total[i]),
                "share": float(total[i]) / grand,
            }
        )
    return rows


def bound_counts(trace: Trace) -> dict[str, dict[str, int]]:
    """step kind (``prefill``/``decode``) -> bound class (or ``none``) -> node-record count."""
    out: dict[str, dict[str, int]] = {}
    for step in trace["steps"]:
        d = out.setdefault(step["kind"], {b: 0 for b in (*BOUND_CLASSES, "none")})
        for rec in step["nodes"]:
            d[rec["perf"]["bound"] or "none"] += 1
    return out


def capture_summary(trace: Trace) -> dict[str, Any]:
    """Capture mode and what it cost: the median and worst per-node capture cost (full-pass
    host time ÷ timing-pass host time), and over the whole trace the full pass's summed host
    time, node time and step wall time, each ÷ the timing pass's (None where not recorded)."""
    run = trace["run"]
    costs, worst = [], (0.0, "")
    sums = dict(host=0.0, full_host=0.0, time=0.0, full_time=0.0, wall=0.0, full_wall=0.0)
    for step in trace["steps"]:
        if step.get("full_wall_s") is not None:
            sums["wall"] += step["wall_s"]
            sums["full_wall"] += step["full_wall_s"]
        for rec in step["nodes"]:
            c = rec["capture_cost"]
            if c is not None:
                costs.append(c)
                if c > worst[0]:
                    worst = (c, f"{trace['nodes'][rec['id']]['name']} ({step['name']})")
            if rec.get("host_s") and rec.get("full_host_s") is not None:
                sums["host"] += rec["host_s"]
                sums["full_host"] += rec["full_host_s"]
            if rec.get("full_time_s") is not None:
                sums["time"] += rec["time_s"]
                sums["full_time"] += rec["full_time_s"]

    def ratio(num: str, den: str) -> float | None:
        return sums[num] / sums[den] if sums[den] > 0 else None

    return {
        "capture": run["capture"],
        "cuda_graph": run["cuda_graph"],
        "pdl": bool(run.get("pdl")),  # absent in traces before programmatic dependent launch
        "alternate_modes": bool(run.get("alternate_modes")),  # absent before session 13
        "nvtx": run["nvtx"],
        "median_cost": float(np.median(costs)) if costs else None,
        "worst_cost": worst if costs else None,
        "host_ratio": ratio("full_host", "host"),
        "time_ratio": ratio("full_time", "time"),
        "wall_ratio": ratio("full_wall", "wall"),
    }


def mode_agreement(trace: Trace) -> dict[str, Any] | None:
    """For a trace recorded with ``--alternate-modes`` (one session's replayed decode steps
    alternating graph and stream, the same buffers): per node, its stream time against the
    graph steps either side (``perf.alternating_mode_ratios``). Returns None for any other
    trace, else {"within": nodes within ``perf.MODE_AGREEMENT``, "nodes": nodes compared,
    "steps": (stream, graph) step counts, "worst": [(name, stream / graph)] the five
    farthest}."""
    if not trace["run"].get("alternate_modes"):
        return None
    times = {m: replayed_node_times(trace, m) for m in ("stream", "graph")}
    if not all(times.values()):
        return None
    ratios = [(trace["nodes"][i]["name"], q) for i, q in alternating_mode_ratios(trace).items()]
    return {
        "within": sum(abs(q - 1) <= MODE_AGREEMENT for _, q in ratios),
        "nodes": len(ratios),
        "steps": tuple(len(next(iter(t.values()))) for t in times.values()),
        "worst": sorted(ratios, key=lambda nq: -abs(nq[1] - 1))[:5],
    }


# -- tokens ----------------------------------------------------------------------------------
def generated_text(trace: Trace, j: int) -> str:
    """The text generated through step ``j``: the chosen tokens of steps 0..j, concatenated."""
    return "".join(s["logits"]["chosen"]["text"] for s in trace["steps"][: j + 1])


def entropies(trace: Trace) -> list[float]:
    return [s["logits"]["entropy"] for s in trace["steps"]]


# -- compare ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeDelta:
    """One node of trace A against the node of the same name in trace B, at one step."""

    id_a: int
    id_b: int
    name: str
    time_a: float
    time_b: float
    #: max |a - b| over min/max/mean/std/absmax and the heatmap cells (less the cells' 8-bit
    #: code steps); None where either side kept no statistics.
    abs_diff: float | None
    #: max(absmax_a, absmax_b): what the difference is judged against.
    scale: float
    nonfinite_a: int | None
    nonfinite_b: int | None
    d_mean: float | None
    d_absmax: float | None

    @property
    def time_ratio(self) -> float | None:
        return self.time_b / self.time_a if self.time_a > 0 else None

    @property
    def rel_diff(self) -> float | None:
        """abs_diff ÷ scale (what the compare plot shows); inf for a difference on zeros."""
        if self.abs_diff is None:
            return None
        if self.scale == 0.0:
            return 0.0 if self.abs_diff == 0.0 else math.inf
        return self.abs_diff / self.scale

    def diverges(self, rtol: float = RTOL, atol: float = ATOL) -> bool:
        if (self.nonfinite_a or 0) != (self.nonfinite_b or 0):
            return True
        return self.abs_diff is not None and self.abs_diff > atol + rtol * self.scale


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


def _abs_diff(sa: Mapping[str, Any], sb: Mapping[str, Any]) -> float | None:
    diffs = [
        abs(sb[k] - sa[k])
        for k in ("min", "max", "mean", "std", "absmax")
        if sa[k] is not None and sb[k] is not None
    ]
    ga, gb = heatmap_grid(sa), heatmap_grid(sb)
    if ga is not None and gb is not None and ga.shape == gb.shape:
        both = np.isfinite(ga) & np.isfinite(gb)
        if both.any():
            # A code is within (hi - lo) / 508 of its cell mean: allow each side's step.
            ha, hb = sa["heatmap"], sb["heatmap"]
            steps = ((ha["hi"] - ha["lo"]) + (hb["hi"] - hb["lo"])) / 508
            diffs.append(max(float(np.abs(ga[both] - gb[both]).max()) - steps, 0.0))
    return max(diffs) if diffs else None


def compare_step(a: Trace, b: Trace, j: int) -> list[NodeDelta]:
    """Per-node deltas of step ``j`` (B minus A), over the nodes both traces have by name, in
    A's execution order. The heatmap term only counts where both grids have the same shape."""
    if j >= len(a["steps"]) or j >= len(b["steps"]):
        return []
    by_name_b = {n["name"]: n["id"] for n in b["nodes"]}
    ra, rb = a["steps"][j]["nodes"], b["steps"][j]["nodes"]
    out = []
    for node in a["nodes"]:
        ib = by_name_b.get(node["name"])
        if ib is None:
            continue
        x, y = ra[node["id"]], rb[ib]
        sa, sb = x["stats"], y["stats"]
        both = sa is not None and sb is not None
        out.append(
            NodeDelta(
                id_a=node["id"],
                id_b=ib,
                name=node["name"],
                time_a=x["time_s"],
                time_b=y["time_s"],
                abs_diff=_abs_diff(sa, sb) if both else None,
                scale=max(sa["absmax"] or 0.0, sb["absmax"] or 0.0) if both else 0.0,
                nonfinite_a=nonfinite(sa),
                nonfinite_b=nonfinite(sb),
                d_mean=_diff(sa["mean"], sb["mean"]) if both else None,
                d_absmax=_diff(sa["absmax"], sb["absmax"]) if both else None,
            )
        )
    return out


def first_divergence(
    deltas: Sequence[NodeDelta], rtol: float = RTOL, atol: float = ATOL
) -> NodeDelta | None:
    """The first node of a step, in execution order, whose output differs beyond the
    tolerance (the whole-trace verdict is :func:`tracekit.trace.diff.diff_traces`)."""
    return next((x for x in deltas if x.diverges(rtol, atol)), None)


def unmatched_nodes(a: Trace, b: Trace) -> tuple[list[str], list[str]]:
    """Node names only in A, and only in B (a different model or graph)."""
    na, nb = [n["name"] for n in a["nodes"]], [n["name"] for n in b["nodes"]]
    sa, sb = set(na), set(nb)
    return [x for x in na if x not in sb], [x for x in nb if x not in sa]
