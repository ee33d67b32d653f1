"""Where a step's device time went (HTA-style), from the intervals its records carry.

A v2 step record holds, per node and where measured per launch, ``start_ns``/``end_ns`` on
the step's device clock (0 = the step's device start; the GPU for cupy, the host for NumPy)
and ``queued_ns``: when the work was handed to the device on the same clock (null: unknown).
From them, per step:

- ``kernel_s``: the sum of the intervals' lengths (each launch's own device time);
- ``host_wait_s``: gaps in which nothing was queued: the device idle until the host handed it
  the next piece of work (a gap before the next interval whose ``queued_ns`` falls after the
  previous end); each such gap is charged to the node that followed it (``host_wait_s`` of
  that node);
- ``other_gap_s``: every other gap (the work was queued: launch latency inside the device,
  a graph's scheduling between nodes, dependencies).

The gaps are read off the timeline (from the end of all earlier work to the next start), so
``kernel_s + host_wait_s + other_gap_s`` equals ``span_s`` (the step's device span:
``steps[j].span_ns`` when recorded, else the last end) exactly when no two intervals overlap;
overlapping intervals (stamps that disagree) leave a negative ``residual_s``, and the step is
``within_tolerance`` when the residual is at most ``TOLERANCE`` of the span.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: The breakdown's three parts must add up to the span within this fraction (the issue's 5%).
TOLERANCE = 0.05


def intervals(step: Mapping[str, Any]) -> list[tuple[int, int, int | None, int]]:
    """(start_ns, end_ns, queued_ns, node id) of a step, sorted by start: each timed launch,
    else the node's own interval; records without intervals (v1 traces) give none."""
    out: list[tuple[int, int, int | None, int]] = []
    for rec in step["nodes"]:
        launches = [la for la in rec.get("launches") or () if "start_ns" in la]
        if launches:
            for la in launches:
                out.append((int(la["start_ns"]), int(la["end_ns"]), la.get("queued_ns"), rec["id"]))
        elif "start_ns" in rec and "end_ns" in rec:
            out.append((int(rec["start_ns"]), int(rec["end_ns"]), rec.get("queued_ns"), rec["id"]))
    out.sort(key=lambda x: (x[0], x[1]))
    return out


def breakdown(
    ivals: Sequence[tuple[int, int, int | None, int]], span_ns: int | None = None
) -> dict[str, Any] | None:
    """The step's kernel time, host wait and other gaps (module docstring), or None without
    intervals.

    Returns:
        ``span_s``, ``kernel_s``, ``host_wait_s``, ``other_gap_s``, ``residual_s`` (span minus
        the three), ``tolerance``, ``within_tolerance`` and ``host_wait_by_node`` (node id ->
        seconds of host wait charged to it).
    """
    if not ivals:
        return None
    end = max(e for _, e, _, _ in ivals)
    span = max(int(span_ns), end) if span_ns is not None else end
    kernel = host = other = 0
    by_node: dict[int, int] = {}
    covered = 0  # the device is busy up to here
    for s, e, q, node in ivals:
        if s > covered:
            gap = s - covered
            # nothing was queued from `covered` until the work arrived at q
            wait = min(gap, max(0, (q if q is not None else covered) - covered))
            host += wait
            other += gap - wait
            if wait:
                by_node[node] = by_node.get(node, 0) + wait
            covered = s
        kernel += e - s  # each launch's own time: overlapping intervals leave a residual
        covered = max(covered, e)
    other += span - covered  # after the last work (e.g. the final stamp, the readback)
    residual = span - (kernel + host + other)
    return {
        "span_s": span * 1e-9,
        "kernel_s": kernel * 1e-9,
        "host_wait_s": host * 1e-9,
        "other_gap_s": other * 1e-9,
        "residual_s": residual * 1e-9,
        "tolerance": TOLERANCE,
        "within_tolerance": abs(residual) <= TOLERANCE * max(span, 1),
        "host_wait_by_node": {k: v * 1e-9 for k, v in by_node.items()},
    }


def step_breakdown(step: Mapping[str, Any]) -> dict[str, Any] | None:
    """:func:`breakdown` of one step record (None for a step without intervals)."""
    return breakdown(intervals(step), step.get("span_ns"))
