"""Join Nsight Compute's per-kernel metrics onto a trace's nodes through their NVTX ranges.

Input: the CSV of ``ncu --nvtx --csv --page raw --print-units base --metrics
dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum`` (directly, or
``ncu --import REPORT.ncu-rep --csv --page raw ...``). The raw page has one row per profiled
kernel, a units row under the header, and with ``--nvtx`` a column
``thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg`` holding the
thread id and the push/pop stack, one quoted entry per open range, outermost first, e.g.::

    4242  "tracekit:decode 1:…"  "tracekit:blk.0:…"  "tracekit:blk.0.ffn_up:…"

Each entry is ``domain:range`` followed by six fields (payload type and value, colour type
and value, message type and message). A kernel belongs to the node named by the innermost
``tracekit`` range and to the step named by its step range (``prefill``, ``decode N``).
The ``--page details`` long form (``Metric Name``/``Metric Value`` rows) is read as well.

Per node the trace gains ``ncu``: the kernels, measured DRAM bytes read/written and GPU time
per pass (a full capture runs each node twice per step: timing pass + full pass), next to the
counted bytes of its launch records.
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

DOMAIN = "tracekit"
READ, WRITE, TIME = "dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum"
METRICS = (READ, WRITE, TIME)
STEP_RE = re.compile(r"^(prefill|decode [0-9]+)$")
#: The tracer's own timing kernels (tracekit/runner/stamps.py: a node's marker, the stamps
#: around a cuBLAS GEMM) run inside node ranges but are not the node's work: not joined.
TIMING_KERNELS = frozenset({"globaltimer_stamp"})
#: Fields after the range name in one stack entry (PL_Type..Msg).
_SUFFIX_FIELDS = 6
_BYTE_UNITS = {
    "byte": 1.0,
    "kbyte": 1e3,
    "mbyte": 1e6,
    "gbyte": 1e9,
    "tbyte": 1e12,
    "kibyte": 1024.0,
    "mibyte": 1024.0**2,
    "gibyte": 1024.0**3,
}
_TIME_UNITS = {
    "nsecond": 1e-9,
    "ns": 1e-9,
    "usecond": 1e-6,
    "us": 1e-6,
    "msecond": 1e-3,
    "ms": 1e-3,
    "second": 1.0,
    "s": 1.0,
}


class NcuError(ValueError):
    """The CSV is not Nsight Compute output this importer understands."""


def _number(text: str, unit: str, what: str) -> float | None:
    raw = (text or "").strip().replace(",", "")
    if not raw or raw.lower() in ("n/a", "nan", "-"):
        return None
    try:
        v = float(raw)
    except ValueError:
        raise NcuError(f"{what}: value {text!r} is not a number") from None
    u = (unit or "").strip().lower()
    if u in _BYTE_UNITS:
        return v * _BYTE_UNITS[u]
    if u in _TIME_UNITS:
        return v * _TIME_UNITS[u]
    if u in ("", "none"):
        return v
    raise NcuError(f"{what}: unit {unit!r} is neither bytes nor time (use --print-units base)")


def parse_nvtx_stack(cell: str) -> list[tuple[str, str]]:
    """(domain, range) pairs of an NVTX push/pop cell, outermost first.

    Reads ncu's raw form (thread id, then ``"domain:range:…"`` entries) and the short form
    ``domain@range/domain@range`` that NVTX filters use.
    """
    entries = re.findall(r'"([^"]*)"', cell or "")
    out: list[tuple[str, str]] = []
    if entries:
        for e in entries:
            parts = e.split(":")
            if len(parts) < 2:
                continue
            if len(parts) >= 2 + _SUFFIX_FIELDS:
                rng = ":".join(parts[1 : len(parts) - _SUFFIX_FIELDS])
            else:
                rng = parts[1]
            out.append((parts[0], rng))
        return out
    for e in (cell or "").strip().split("/"):
        if "@" in e:
            dom, rng = e.split("@", 1)
            out.append((dom.strip(), rng.strip()))
        elif e.strip():
            out.append(("", e.strip()))
    return out


def _rows(text: str, source: str) -> tuple[list[str], list[str], list[list[str]]]:
    """Header, units and data rows of the CSV (ncu's ``==PROF==`` and program lines skipped)."""
    lines = text.splitlines()
    start = next(
        (i for i, ln in enumerate(lines) if ln.startswith('"ID"') or ln.startswith("ID,")), None
    )
    if start is None:
        raise NcuError(f'{source}: no Nsight Compute CSV header (a line starting with "ID")')
    rows = [r for r in csv.reader(io.StringIO("\n".join(lines[start:]))) if r]
    header = rows[0]
    n = len(header)
    body = [r for r in rows[1:] if len(r) == n]
    units = [""] * n
    if body and body[0][0] == "":
        units, body = body[0], body[1:]
    return header, units, body


def read_ncu_csv(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The profiled kernels of an ncu CSV: ``id``, ``kernel``, ``stack`` and the three metrics
    (bytes, seconds; None where a metric is absent).

    Raises:
        NcuError: no header, no NVTX column, or a metric value that is not a number.
    """
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise NcuError(f"{source}: cannot read ({e.strerror or e})") from None
    header, units, body = _rows(text, source)
    col = {h: i for i, h in enumerate(header)}
    nvtx_col = next((h for h in header if "Push/Pop_Range" in h or h == "NVTX"), None)
    if nvtx_col is None:
        raise NcuError(f"{source}: no NVTX column: profile with `ncu --nvtx`")
    if "Kernel Name" not in col:
        raise NcuError(f"{source}: no 'Kernel Name' column")
    kernels: dict[str, dict[str, Any]] = {}
    long_form = "Metric Name" in col and "Metric Value" in col
    for r in body:
        kid = r[col["ID"]]
        k = kernels.setdefault(
            kid,
            {
                "id": kid,
                "kernel": r[col["Kernel Name"]],
                "stack": parse_nvtx_stack(r[col[nvtx_col]]),
                **{m: None for m in METRICS},
            },
        )
        if long_form:
            m = r[col["Metric Name"]]
            if m in METRICS:
                unit = r[col["Metric Unit"]] if "Metric Unit" in col else ""
                k[m] = _number(r[col["Metric Value"]], unit, f"{source}: kernel {kid} {m}")
        else:
            for m in METRICS:
                if m in col:
                    k[m] = _number(r[col[m]], units[col[m]], f"{source}: kernel {kid} {m}")
    return list(kernels.values())


def import_ncu(trace: dict[str, Any], csv_path: str | os.PathLike[str]) -> dict[str, Any]:
    """Add Nsight Compute measurements to the trace's nodes (returns the same, updated trace).

    Each kernel joins the node of its innermost ``tracekit`` NVTX range and the step of its step
    range. Per node: ``ncu = {kernels, dram_bytes_read, dram_bytes_write, gpu_time_s,
    measured_bytes, counted_bytes, passes}``, values per pass. The trace gains ``ncu`` with the
    source and match counts.

    Raises:
        NcuError: as :func:`read_ncu_csv`; or no kernel matched any node of this trace.
    """
    kernels = read_ncu_csv(csv_path)
    nodes = trace["nodes"]
    by_name = {n["name"]: n["id"] for n in nodes}
    steps = {s["name"]: s for s in trace["steps"]}
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    unmatched: set[str] = set()
    for k in kernels:
        if k["kernel"] in TIMING_KERNELS:
            continue
        ours = [r for d, r in k["stack"] if d == DOMAIN]
        step = next((r for r in ours if STEP_RE.match(r)), None)
        node = next((r for r in reversed(ours) if r in by_name), None)
        if step is None or node is None or step not in steps:
            unmatched.add("/".join(f"{d}@{r}" for d, r in k["stack"]) or "(no NVTX range)")
            continue
        groups[(step, by_name[node])].append(k)
    if not groups:
        raise NcuError(
            f"{csv_path}: none of {len(kernels)} profiled kernels ran inside a {DOMAIN!r} node "
            "range of this trace (profile with --nvtx, the same model and steps)"
        )
    for (step, nid), ks in groups.items():
        rec = steps[step]["nodes"][nid]
        per_pass = max(1, len(rec["launches"]))
        passes = max(1, round(len(ks) / per_pass))

        def total(m: str, ks: list[dict[str, Any]] = ks, passes: int = passes) -> float | None:
            vals = [k[m] for k in ks if k[m] is not None]
            return sum(vals) / passes if vals else None

        rd, wr = total(READ), total(WRITE)
        counted = sum(la["bytes_read"] + la["bytes_written"] for la in rec["launches"])
        rec["ncu"] = {
            "kernels": [k["kernel"] for k in ks],
            "passes": passes,
            "dram_bytes_read": rd,
            "dram_bytes_write": wr,
            "gpu_time_s": total(TIME),
            "measured_bytes": (rd or 0.0) + (wr or 0.0)
            if rd is not None or wr is not None
            else None,
            "counted_bytes": counted,
        }
    trace["ncu"] = {
        "source": str(csv_path),
        "kernels_in_csv": len(kernels),
        "kernels_matched": sum(len(v) for v in groups.values()),
        "nodes_matched": len(groups),
        "unmatched_ranges": sorted(unmatched)[:50],
    }
    return trace


def summary(trace: dict[str, Any]) -> str:
    """Counted vs measured bytes per matched node, as text."""
    lines = [
        f"{'step':10s} {'node':28s} {'counted':>12s} {'measured':>12s} {'ratio':>6s} {'ncu time':>10s}"
    ]
    for step in trace["steps"]:
        for rec in step["nodes"]:
            m = rec.get("ncu")
            if not m:
                continue
            name = trace["nodes"][rec["id"]]["name"]
            meas = m["measured_bytes"]
            ratio = (
                f"{meas / m['counted_bytes']:.2f}"
                if meas is not None and m["counted_bytes"]
                else "-"
            )
            t = f"{m['gpu_time_s'] * 1e6:.2f} µs" if m["gpu_time_s"] is not None else "-"
            lines.append(
                f"{step['name']:10s} {name:28s} {m['counted_bytes']:12,d} "
                f"{(f'{meas:,.0f}' if meas is not None else '-'):>12s} {ratio:>6s} {t:>10s}"
            )
    return "\n".join(lines)
