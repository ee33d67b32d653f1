"""Chrome Trace Event JSON (what Perfetto and chrome://tracing open) from a tracekit trace.

Layout: one process per step (``prefill``, ``decode 1``, …), its node slices on one thread at
their recorded device times (v2 traces: ``start_ns``/``end_ns`` on the step's clock, so a gap
is a gap; v1 traces have none and are laid end to end by node time), nested inside the step
slice and a layer slice (``blk.7``), as the NVTX ranges nest; the gaps in which the device
waited for the host are slices of a second thread (``host wait``); each slice is named after the node (the NVTX message) with its kernel
family as category (the NVTX category) and carries perf and stats in ``args``. Steps follow each
other on one clock. Counter tracks per step hold absmax, mean and the NaN+Inf count per node.
A trace's load phase (the w16 cache's warm-up) is a process ``load`` before the steps: one
dequant slice per weight, laid end to end by its time (they were timed one by one).
Times are whole nanoseconds internally, so a parent slice always contains its children.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tracekit.trace.format import atomic_write_text

_NODE_TID = 1
_WAIT_TID = 2
_COUNTERS = (("absmax", "absmax"), ("mean", "mean"))


def _us(ns: int) -> float:
    return ns / 1000.0


def _node_args(node: dict[str, Any], rec: dict[str, Any]) -> dict[str, Any]:
    args: dict[str, Any] = {
        "id": node["id"],
        "op": node["op"],
        "layer": node["layer"],
        "shape": rec["shape"],
        "dtype": rec["dtype"],
        "time_us": rec["time_s"] * 1e6,
        "kernels": [la["kernel"] for la in rec["launches"]],
    }
    perf = rec.get("perf") or {}
    for k in (
        "bound",
        "bytes",
        "flops",
        "intensity",
        "achieved_Bps",
        "fraction_of_ceiling",
        "reason",
    ):
        if perf.get(k) is not None:
            args[k] = perf[k]
    stats = rec.get("stats")
    if stats:
        for k in ("min", "max", "mean", "std", "absmax", "nan", "pos_inf", "neg_inf", "zeros"):
            args[k] = stats[k]
    if rec.get("capture_cost") is not None:
        args["capture_cost"] = rec["capture_cost"]
    if rec.get("ncu"):
        args["ncu_dram_bytes"] = rec["ncu"].get("measured_bytes")
        args["ncu_time_us"] = (rec["ncu"].get("gpu_time_s") or 0) * 1e6
    return args


def chrome_events(trace: dict[str, Any]) -> dict[str, Any]:
    """The Chrome Trace Event document (``{"traceEvents": [...], ...}``) of a trace."""
    nodes = trace["nodes"]
    events, clock_ns = _load_events(trace.get("load"))  # the steps start after it
    for step in trace["steps"]:
        pid = step["index"] + 1
        name = step["name"]
        events += [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
            {
                "ph": "M",
                "name": "process_sort_index",
                "pid": pid,
                "tid": 0,
                "args": {"sort_index": pid},
            },
            {
                "ph": "M",
                "name": "thread_name",
                "pid": pid,
                "tid": _NODE_TID,
                "args": {"name": "nodes"},
            },
        ]
        step_start = clock_ns
        layer: tuple[int, int] | None = None  # (layer index, start ns)
        slices: list[dict[str, Any]] = []
        counters: list[dict[str, Any]] = []
        timed = all("start_ns" in r for r in step["nodes"])
        layer_end = clock_ns
        for rec in step["nodes"]:
            node = nodes[rec["id"]]
            if timed:  # the recorded device interval, on this step's clock
                clock_ns = step_start + int(rec["start_ns"])
                dur = max(1, int(rec["end_ns"]) - int(rec["start_ns"]))
            else:  # v1: end to end by node time
                dur = max(1, round(rec["time_s"] * 1e9))  # a zero-length slice would vanish
            if layer is not None and layer[0] != node["layer"]:
                slices.append(_layer_slice(pid, layer, layer_end))
                layer = None
            if layer is None and node["layer"] is not None:
                layer = (node["layer"], clock_ns)
            wait = rec.get("host_wait_s") or 0.0
            if timed and wait > 0:
                w = max(1, round(wait * 1e9))
                slices.append(
                    {
                        "ph": "X", "name": "host wait", "cat": "idle", "pid": pid,
                        "tid": _WAIT_TID, "ts": _us(clock_ns - w), "dur": _us(w),
                        "args": {"before": node["name"], "wait_us": wait * 1e6},
                    }
                )  # fmt: skip
            slices.append(
                {
                    "ph": "X",
                    "name": node["name"],
                    "cat": node["family"],
                    "pid": pid,
                    "tid": _NODE_TID,
                    "ts": _us(clock_ns),
                    "dur": _us(dur),
                    "args": _node_args(node, rec),
                }
            )
            stats = rec.get("stats")
            if stats:
                ts = _us(clock_ns)
                for cname, key in _COUNTERS:
                    if stats.get(key) is not None:
                        counters.append(
                            {
                                "ph": "C",
                                "name": cname,
                                "pid": pid,
                                "ts": ts,
                                "args": {cname: stats[key]},
                            }
                        )
                bad = stats["nan"] + stats["pos_inf"] + stats["neg_inf"]
                counters.append(
                    {"ph": "C", "name": "nan+inf", "pid": pid, "ts": ts, "args": {"nan+inf": bad}}
                )
            clock_ns += dur
            layer_end = clock_ns
        if timed and step.get("span_ns") is not None:
            clock_ns = max(clock_ns, step_start + int(step["span_ns"]))
        if layer is not None:
            slices.append(_layer_slice(pid, layer, layer_end))
        bd = step.get("breakdown")
        extra = (
            {k: bd[k] * 1e6 for k in ("kernel_s", "host_wait_s", "other_gap_s", "span_s")}
            if bd
            else {}
        )
        events.append(
            {
                "ph": "X",
                "name": name,
                "cat": "step",
                "pid": pid,
                "tid": _NODE_TID,
                "ts": _us(step_start),
                "dur": _us(clock_ns - step_start),
                "args": {
                    "n_tokens": step["n_tokens"],
                    "n_past": step["n_past"],
                    "wall_us": step["wall_s"] * 1e6,
                    "chosen": step["logits"]["chosen"],
                    "launch_mode": step.get("launch_mode"),
                    **{k.replace("_s", "_us"): v for k, v in extra.items()},
                },
            }
        )
        events += slices + counters
    run = trace["run"]
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {
            "source": "tracekit",
            "model": trace["model"]["name"],
            "backend": run["backend"],
            "device": run["device"],
            "capture": run["capture"],
            "time": (trace.get("derived") or {}).get("time_label", "GPU time"),
            "note": "node slices at their recorded device times (gaps are gaps)"
            if all("start_ns" in r for st in trace["steps"] for r in st["nodes"])
            else "v1 trace: node slices laid end to end by measured node time (gaps removed)",
        },
    }


def _load_events(load: dict[str, Any] | None) -> tuple[list[dict[str, Any]], int]:
    """The load phase as process 0 (``load``): a ``dequant`` slice per weight, end to end from
    0 by its time, inside one ``load`` slice; and where it ends (ns). ([], 0) without one."""
    if not load or not load["nodes"]:
        return [], 0
    meta = {"ph": "M", "pid": 0, "tid": 0}
    out: list[dict[str, Any]] = [
        {**meta, "name": "process_name", "args": {"name": "load"}},
        {**meta, "name": "process_sort_index", "args": {"sort_index": 0}},
        {**meta, "name": "thread_name", "tid": _NODE_TID, "args": {"name": "nodes"}},
    ]
    slices, clock = [], 0
    for k, n in enumerate(load["nodes"]):
        dur = max(1, round(n["time_s"] * 1e9))
        args = {"weight": n["weight"], "weight_type": n["weight_type"], "shape": n["shape"]}
        args |= {
            "time_us": n["time_s"] * 1e6,
            "kernels": [la["kernel"] for la in n["launches"]],
            "path": [(la.get("extra") or {}).get("path") for la in n["launches"]],
        }
        perf = n.get("perf") or {}
        args |= {k: perf[k] for k in ("bound", "bytes", "achieved_Bps", "reason") if k in perf}
        slices.append(
            {
                "ph": "X", "name": n["weight"], "cat": "dequant", "pid": 0, "tid": _NODE_TID,
                "ts": _us(clock), "dur": _us(dur), "args": {"id": k, **args},
            }
        )  # fmt: skip
        clock += dur
    out.append(
        {
            "ph": "X", "name": "load", "cat": "step", "pid": 0, "tid": _NODE_TID, "ts": 0.0,
            "dur": _us(clock), "args": {"weights": len(slices), "seconds": load["seconds"]},
        }
    )  # fmt: skip
    return out + slices, clock


def _layer_slice(pid: int, layer: tuple[int, int], end_ns: int) -> dict[str, Any]:
    return {
        "ph": "X",
        "name": f"blk.{layer[0]}",
        "cat": "layer",
        "pid": pid,
        "tid": _NODE_TID,
        "ts": _us(layer[1]),
        "dur": _us(end_ns - layer[1]),
        "args": {"layer": layer[0]},
    }


def export_chrome(trace: dict[str, Any], out: str | os.PathLike[str]) -> Path:
    """Write ``trace`` as Chrome Trace Event JSON to ``out`` (atomically).

    Returns:
        The output path.
    """
    text = json.dumps(chrome_events(trace), allow_nan=False, separators=(",", ":"))
    return atomic_write_text(out, text)


def export_logits(
    trace: dict[str, Any], trace_path: str | os.PathLike[str], out: str | os.PathLike[str]
) -> list[Path]:
    """The logits a ``--save-logits`` recording kept, for comparison with Hugging Face or
    llama.cpp (``llama-debug --save-logits``): ``out`` (``.npy`` added when missing) holds
    f32 [steps, n_vocab], row k the logits that chose step k's token; ``<out stem>.tokens.npy``
    the chosen token ids (int64 [steps]). Each file is written atomically.

    Raises:
        TraceError: the trace has no sidecar, the sidecar fails its checksum, or holds no logits.
    """
    import io

    import numpy as np

    from tracekit.trace.format import TraceError, atomic_write_bytes
    from tracekit.trace.tensors import load_tensors, step_logits

    tensors = load_tensors(trace, trace_path)
    if tensors is None:
        raise TraceError(f"{trace_path}: no tensor sidecar (record with --save-logits)")
    logits, chosen = step_logits(tensors)
    out = Path(out)
    if out.suffix != ".npy":
        out = out.with_name(out.name + ".npy")
    paths = []
    for path, arr in ((out, logits), (out.with_name(out.stem + ".tokens.npy"), chosen)):
        buf = io.BytesIO()
        np.save(buf, arr)
        paths.append(atomic_write_bytes(path, buf.getvalue()))
    return paths
