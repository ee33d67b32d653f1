"""Chrome Trace Event JSON (what Perfetto and chrome://tracing open) from a tracekit trace.

Layout: one process per step (``prefill``, ``decode 1``, …), its node slices laid end to end
by measured node time on one thread, nested inside the step slice and a layer slice (``blk.7``),
as the NVTX ranges nest; each slice is named after the node (the NVTX message) with its kernel
family as category (the NVTX category) and carries perf and stats in ``args``. Steps follow each
other on one clock. Counter tracks per step hold absmax, mean and the NaN+Inf count per node.
Times are whole nanoseconds internally, so a parent slice always contains its children.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tracekit.runner.trace import atomic_write_text

_NODE_TID = 1
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
    events: list[dict[str, Any]] = []
    clock_ns = 0
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
        for rec in step["nodes"]:
            node = nodes[rec["id"]]
            dur = max(1, round(rec["time_s"] * 1e9))  # a zero-length slice would vanish
            if layer is not None and layer[0] != node["layer"]:
                slices.append(_layer_slice(pid, layer, clock_ns))
                layer = None
            if layer is None and node["layer"] is not None:
                layer = (node["layer"], clock_ns)
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
        if layer is not None:
            slices.append(_layer_slice(pid, layer, clock_ns))
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
            "note": "node slices are laid end to end by measured node time (host gaps removed)",
        },
    }


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
