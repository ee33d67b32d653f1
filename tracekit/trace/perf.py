"""The bound model: each launch's lower-bound time against the measured ceilings.

For every launch (docs/trace-format.md, "Bound model"; written into every trace as
``classification.rule``)::

    T* = max(bytes / bandwidth, flops / peak[math path], launch floor[launch mode])

- its class is the term that attains the max: ``bandwidth``, ``compute`` or ``launch``;
- its efficiency is T* / measured time (1.0 = it ran at the bound);
- an efficiency above 1 + ``TOLERANCE`` means a ceiling or a byte count is wrong (weights
  resident in L2, say): the record is ``flag``-ged with the reason, and what is shown
  (``fraction_of_ceiling``) is never above 1.

A node combines its launches time-weighted: efficiency = sum(T*) / sum(measured); where its
launches carry their own times (``time_s``) those weigh, else their T* do (the node's time is
then the only measurement). Its class is the class holding most of that weight; its reason
names the deciding launch's term with its numbers.

Math paths (``math_path`` of a launch, top level or in ``extra``): a name of
``ceilings.peak_flops_by_path`` (``f16_tensor_core`` for the cuBLASLt GEMM; the quantized
matmul's name once it records one). A launch without one, or with a path not measured, uses
the highest measured peak, so T* stays a lower bound; its reason says so.

Launch modes (a step's ``launch_mode``): ``stream`` (each kernel launched into a busy stream:
the dispatch chain and plan replay), ``graph`` (a node of a CUDA graph), ``host`` (one NumPy
call on the CPU). The floors are ``ceilings.launch_floor_s[mode]``, measured per device.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from tracekit.kernels.ceilings import bandwidth_ceiling

#: Efficiencies up to 1 + TOLERANCE are measurement noise (timer resolution, ceilings' own
#: run-to-run spread) and shown as 100%; beyond it the record is flagged.
TOLERANCE = 0.10
BOUND_CLASSES = ("launch", "bandwidth", "compute")
LAUNCH_MODES = ("stream", "graph", "host")

RULE = (
    "per launch T* = max(bytes / bandwidth (the fastest measured stream: copy, read or write), "
    "flops / peak_flops[math path], "
    "launch_floor[launch mode]); class = the term attaining the max (bandwidth / compute / "
    "launch); efficiency = T* / measured time, flagged above 1 + tolerance (a ceiling or byte "
    "count is wrong) and never shown above 100%; a node: sum T* / sum measured, class of the "
    "largest time share"
)


def fmt_bytes(n: float) -> str:
    """Decimal units, as bandwidths are quoted (1 KB = 1000 B)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def fmt_rate(x: float, unit: str) -> str:
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def fmt_time(s: float) -> str:
    if s >= 1.0:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    if s >= 1e-6:
        return f"{s * 1e6:.3g} µs"
    if s >= 1e-9:
        return f"{s * 1e6:.2g} µs"
    return "<0.001 µs" if s > 0 else "0 µs"


def time_label(backend: str | None) -> str:
    """What a trace's times are: "CPU time" for NumPy traces, else "GPU time"."""
    return "CPU time" if backend == "numpy" else "GPU time"


def bounds(ceilings: Mapping[str, Any]) -> dict[str, Any]:
    """The ceilings the model uses: ``bandwidth_Bps`` (the fastest measured stream:
    ceilings.bandwidth_ceiling) and ``bandwidth_stream`` (which: copy, read or write),
    ``peaks`` (math path -> flop/s) and ``floors`` (launch mode -> seconds).

    Ceilings measured before the per-path and per-mode keys existed (trace v1) give one peak
    (named after their backend's GEMM) and floors from ``launch_back_to_back_s`` (a kernel in
    a busy stream) where measured, else ``launch_overhead_s``.
    """
    bw, bw_stream = bandwidth_ceiling(ceilings)
    peaks = {k: float(v) for k, v in (ceilings.get("peak_flops_by_path") or {}).items() if v}
    if not peaks:
        name = "f32_matmul" if ceilings.get("backend") == "numpy" else "f16_tensor_core"
        peaks = {name: float(ceilings["peak_flops"])}
    floors = {k: float(v) for k, v in (ceilings.get("launch_floor_s") or {}).items() if v}
    if not floors:
        one = float(ceilings["launch_overhead_s"])
        stream = float(ceilings.get("launch_back_to_back_s") or one)
        floors = {"stream": stream, "graph": stream, "host": one}
    return {"bandwidth_Bps": bw, "bandwidth_stream": bw_stream, "peaks": peaks, "floors": floors}


def classification(ceilings: Mapping[str, Any]) -> dict[str, Any]:
    """The trace's ``classification`` object: the rule in words and the ceilings it used."""
    b = bounds(ceilings)
    peak = max(b["peaks"].values())
    return {
        "rule": RULE,
        "tolerance": TOLERANCE,
        "launch_overhead_s": min(b["floors"].values()),
        "bandwidth_Bps": b["bandwidth_Bps"],
        "bandwidth_stream": b["bandwidth_stream"],
        "peak_flops": peak,
        "ridge_flop_per_byte": peak / b["bandwidth_Bps"],
        "peak_flops_by_path": b["peaks"],
        "launch_floor_s": b["floors"],
    }


def _get(rec: Any, key: str, default: Any = 0) -> Any:
    if isinstance(rec, Mapping):
        return rec.get(key, default)
    return getattr(rec, key, default)


def _math_path(rec: Any) -> str | None:
    path = _get(rec, "math_path", None)
    if path is None:
        extra = _get(rec, "extra", None) or {}
        path = extra.get("math_path")
    return path


def launch_time(rec: Any) -> float | None:
    """A launch's own measured device seconds: ``time_s``, else ``end_ns - start_ns``."""
    t = _get(rec, "time_s", None)
    if t is None:
        a, b = _get(rec, "start_ns", None), _get(rec, "end_ns", None)
        if a is not None and b is not None:
            t = (int(b) - int(a)) * 1e-9
    return float(t) if t is not None else None


def launch_bound(
    rec: Any, b: Mapping[str, Any], mode: str, time_s: float | None = None
) -> dict[str, Any]:
    """One launch under the model: its three terms, T*, class, efficiency and flag.

    Args:
        rec: a ``LaunchRecord`` or its JSON dict.
        b: :func:`bounds` of the trace's ceilings.
        mode: the step's launch mode (``stream``/``graph``/``host``).
        time_s: its measured seconds (default: the record's own, :func:`launch_time`).
    """
    nbytes = int(_get(rec, "bytes_read")) + int(_get(rec, "bytes_written"))
    flops = int(_get(rec, "flops"))
    path = _math_path(rec)
    peaks = b["peaks"]
    if path in peaks:
        peak, path_note = peaks[path], path
    else:
        best = max(peaks, key=peaks.__getitem__)
        peak = peaks[best]
        why = f"no {path} peak measured" if path else "no math path recorded"
        path_note = f"{why}: the highest peak, {best}"
    floors = b["floors"]
    floor = floors[mode] if mode in floors else min(floors.values())
    terms = {
        "bandwidth": nbytes / b["bandwidth_Bps"],
        "compute": flops / peak,
        "launch": floor,
    }
    bound = max(terms, key=terms.__getitem__)
    t_star = terms[bound]
    t = launch_time(rec) if time_s is None else time_s
    eff = t_star / t if t else None
    words = {
        "bandwidth": f"{fmt_bytes(nbytes)} at {fmt_rate(b['bandwidth_Bps'], 'B/s')} "
        f"({b['bandwidth_stream']}) = "
        f"{fmt_time(terms['bandwidth'])}",
        "compute": f"{fmt_rate(flops, 'flop')} at {fmt_rate(peak, 'flop/s')} ({path_note}) = "
        f"{fmt_time(terms['compute'])}",
        "launch": f"{mode} launch floor {fmt_time(floor)}",
    }
    # the terms it beat; a launch with no flops (or bytes) has no such term to state
    others = [words[k] for k in BOUND_CLASSES if k != bound and terms[k] > 0]
    reason = f"{bound}-bound: {words[bound]}"
    if others:
        reason += " >= " + " and ".join(others)
    return {
        "kernel": _get(rec, "kernel", "?"),
        "bytes": nbytes,
        "flops": flops,
        "math_path": path,
        "t_bandwidth_s": terms["bandwidth"],
        "t_compute_s": terms["compute"],
        "t_launch_s": floor,
        "t_star_s": t_star,
        "time_s": t,
        "bound": bound,
        "efficiency": eff,
        "reason": reason,
    }


def _flag(eff: float | None, t_star: float, t: float | None, deciding: str) -> str | None:
    if eff is None or eff <= 1.0 + TOLERANCE:
        return None
    return (
        f"bound {fmt_time(t_star)} exceeds the measured {fmt_time(t or 0.0)} "
        f"({100 * eff:.0f}%, over the {100 * TOLERANCE:.0f}% tolerance): a ceiling or a byte "
        f"count is wrong for {deciding} (data resident in L2, say)"
    )


def annotate(
    launches: Iterable[Any],
    time_s: float | None,
    ceilings: Mapping[str, Any],
    mode: str = "stream",
) -> dict[str, Any]:
    """The ``perf`` object of one node (derived; docs/trace-format.md, "Bound model").

    Args:
        launches: the node's launch records (``LaunchRecord`` or their JSON dicts); where
            every one carries its own time (``time_s`` or ``start_ns``/``end_ns``), the node's
            measured time is their sum.
        time_s: the node's measured time; used when its launches are not each timed; None when
            unmeasured (rates and efficiency are then null, the class still stands).
        ceilings: the trace's ``ceilings``.
        mode: the step's launch mode, which picks the launch floor.

    Returns:
        ``bytes``, ``flops``, ``launches``, ``intensity``, ``achieved_Bps``, ``achieved_flops``,
        ``t_star_s``, ``efficiency`` (raw), ``fraction_of_ceiling`` (efficiency shown: at most
        1), ``flag`` (why an efficiency is impossible, or null), ``bound``, ``reason``, and
        ``per_launch`` (each launch's terms, class and efficiency).
    """
    b = bounds(ceilings)
    recs = list(launches)
    own = [launch_time(r) for r in recs]
    timed_each = bool(recs) and all(t is not None and t > 0 for t in own)
    per = [launch_bound(r, b, mode, t) for r, t in zip(recs, own, strict=True)]
    nbytes = sum(p["bytes"] for p in per)
    flops = sum(p["flops"] for p in per)
    if timed_each:
        t: float | None = float(sum(own))  # type: ignore[arg-type]
    else:
        t = float(time_s) if time_s is not None and time_s > 0 else None
    out: dict[str, Any] = {
        "bytes": nbytes,
        "flops": flops,
        "launches": len(recs),
        "intensity": flops / nbytes if nbytes else None,
        "achieved_Bps": nbytes / t if t else None,
        "achieved_flops": flops / t if t else None,
        "t_star_s": None,
        "efficiency": None,
        "fraction_of_ceiling": None,
        "flag": None,
        "bound": None,
        "reason": "no kernel launches: nothing to classify",
        "per_launch": per,
    }
    if not recs:
        return out
    t_star = sum(p["t_star_s"] for p in per)
    weights = [p["time_s"] for p in per] if timed_each else [p["t_star_s"] for p in per]
    share = dict.fromkeys(BOUND_CLASSES, 0.0)
    for p, w in zip(per, weights, strict=True):
        share[p["bound"]] += w
    bound = max(BOUND_CLASSES, key=share.__getitem__)
    # the deciding launch: the heaviest of the winning class
    k = max((i for i, p in enumerate(per) if p["bound"] == bound), key=weights.__getitem__)
    eff = t_star / t if t else None
    out.update(t_star_s=t_star, efficiency=eff, bound=bound)
    out["fraction_of_ceiling"] = min(eff, 1.0) if eff is not None else None
    deciding = per[k]["kernel"] if len(per) > 1 else "this launch"
    out["flag"] = _flag(eff, t_star, t, deciding)
    reason = per[k]["reason"]
    if len(per) > 1:
        total = sum(weights) or 1.0
        reason = (
            f"{bound}-bound ({100 * share[bound] / total:.0f}% of "
            f"{'the measured time' if timed_each else 'the bound'} in {bound}-bound launches); "
            f"deciding: {per[k]['kernel']}, {reason}; {len(per)} launches, bound "
            f"{fmt_time(t_star)}"
        )
    if t:
        what = "sum of its launches" if timed_each and len(per) > 1 else "measured"
        reason += f"; ran {fmt_time(t)} ({what}): efficiency {100 * min(eff or 0, 1.0):.3g}%"
    if out["flag"]:
        reason += f"; FLAGGED: {out['flag']}"
    out["reason"] = reason
    return out


# -- a whole trace: derived on load -------------------------------------------------------------
#: Keys :func:`derive_trace` adds; never stored (trace.compact drops them), always recomputed.
DERIVED_TOP = ("classification", "derived")
DERIVED_STEP = ("breakdown",)
DERIVED_RECORD = ("perf", "host_wait_s")

LEGACY_NOTE = (
    "trace format v1: node times are CUDA-event times around each node (they include the GPU "
    "waiting for the host) or, with CUDA graphs, start-to-start stamps; launches carry no "
    "time of their own and steps no device intervals. Verdicts recomputed under the v2 bound "
    "model, the launch floor taken from the ceilings' back-to-back launch time where measured."
)


def step_launch_mode(trace: Mapping[str, Any], step: Mapping[str, Any]) -> str:
    """The step's ``launch_mode``; for v1 steps: host (NumPy), graph (a CUDA-graph run's
    decode steps) or stream."""
    mode = step.get("launch_mode")
    if mode:
        return str(mode)
    run = trace.get("run", {})
    if run.get("backend") == "numpy":
        return "host"
    return "graph" if run.get("cuda_graph") and step.get("kind") == "decode" else "stream"


#: A node's times in two launch modes agree within this (the graph/stream agreement test,
#: scripts/bound_report.py and the dashboard's overview).
MODE_AGREEMENT = 0.15


def replayed_node_times(
    trace: Mapping[str, Any], mode: str | None = None
) -> dict[int, list[float]]:
    """Per node id, its times over the replayed decode steps (all decode steps but the first,
    the recording, when there are more); ``mode``: only the steps of that launch mode
    (:func:`step_launch_mode`; an ``--alternate-modes`` run has both)."""
    steps = [s for s in trace["steps"] if s["kind"] == "decode"]
    steps = steps[1:] or steps
    if mode is not None:
        steps = [s for s in steps if step_launch_mode(trace, s) == mode]
    by_id: dict[int, list[float]] = {}
    for s in steps:
        for x in s["nodes"]:
            by_id.setdefault(x["id"], []).append(x["time_s"])
    return by_id


def alternating_mode_ratios(trace: Mapping[str, Any]) -> dict[int, float]:
    """For an ``--alternate-modes`` trace (its replayed decode steps alternate graph, stream,
    graph, ... on the same buffers): per node id, the median over every stream step and each
    graph step beside it of the node's stream time over its graph time. Neighbours compare one
    position with the next: a node whose time grows with the position (attention over the
    cache) would otherwise compare the medians of different positions. The median of the
    pairs, not of each stream step against its neighbours' mean: one slow ~1 us sample then
    moves one pair, not two. Nodes whose graph time is zero (views, no launch) are left out."""
    if not trace.get("run", {}).get("alternate_modes"):
        raise ValueError("the trace was not recorded with alternate_modes")
    steps = [s for s in trace["steps"] if s["kind"] == "decode"]
    steps = steps[1:] or steps
    modes = [step_launch_mode(trace, s) for s in steps]
    by_id: dict[int, list[float]] = {}
    for k, s in enumerate(steps):
        if modes[k] != "stream":
            continue
        for j in (k - 1, k + 1):
            if not (0 <= j < len(steps) and modes[j] == "graph"):
                continue
            for x, g in zip(s["nodes"], steps[j]["nodes"], strict=True):
                if g["time_s"] > 0:
                    by_id.setdefault(x["id"], []).append(x["time_s"] / g["time_s"])
    return {i: float(statistics.median(v)) for i, v in by_id.items()}


def derive_trace(trace: dict[str, Any]) -> dict[str, Any]:
    """Add the derived keys, in place: ``classification``; per step ``breakdown`` (see
    tracekit.trace.timeline); per node record ``perf`` and ``host_wait_s``; ``derived``
    (``time_label``, ``legacy`` and, for v1, its note). Returns the trace."""
    from tracekit.trace.timeline import step_breakdown

    ceil = trace["ceilings"]
    legacy = trace.get("version", 1) < 2
    trace["classification"] = classification(ceil)
    backend = trace.get("run", {}).get("backend")
    trace["derived"] = {
        "time_label": time_label(backend),
        "legacy": legacy,
        "note": LEGACY_NOTE if legacy else None,
    }
    for step in trace["steps"]:
        mode = step_launch_mode(trace, step)
        bd = step_breakdown(step)
        step["breakdown"] = bd
        waits = bd["host_wait_by_node"] if bd else {}
        for rec in step["nodes"]:
            rec["perf"] = annotate(rec["launches"], rec["time_s"], ceil, mode)
            rec["host_wait_s"] = waits.get(rec["id"], 0.0) if bd else None
    return trace
