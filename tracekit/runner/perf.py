"""Bound classification: each node's launch records against the device's measured ceilings.

The rule (written into every trace as ``classification.rule``):

1. **launch-bound** when the node's memory traffic at the copy bandwidth, and its flops at peak,
   would both take less than its launches cost (launches × the empty-kernel launch time): the
   seed's 30-token embed (~123 KB at 3-4 TB/s is ~0.03 µs, against a ~6.7 µs CuPy launch);
2. otherwise **bandwidth-bound** when its arithmetic intensity (flop per byte moved) is under
   the ridge point (peak flop/s ÷ copy bandwidth): the residual add (1 flop per 12 B moved);
3. otherwise **compute-bound**.

``fraction_of_ceiling`` measures the node against the ceiling of its class: achieved bandwidth
÷ copy bandwidth (bandwidth), achieved flop/s ÷ peak (compute), launch floor time ÷ node time
(launch; 1.0 = the node took no longer than its launches cost).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

RULE = (
    "launch-bound if bytes / copy_bandwidth and flops / peak_flops are both under "
    "launches x launch_overhead; else bandwidth-bound if intensity (flop/byte) < ridge "
    "(peak_flops / copy_bandwidth); else compute-bound. fraction_of_ceiling: achieved "
    "bandwidth / copy bandwidth (bandwidth), achieved flop/s / peak (compute), "
    "launches x launch_overhead / node time (launch)."
)


def classification(ceilings: Mapping[str, Any]) -> dict[str, Any]:
    """The trace's ``classification`` object: the rule in words and the thresholds used."""
    return {
        "rule": RULE,
        "launch_overhead_s": float(ceilings["launch_overhead_s"]),
        "bandwidth_Bps": float(ceilings["copy_bandwidth_Bps"]),
        "peak_flops": float(ceilings["peak_flops"]),
        "ridge_flop_per_byte": float(ceilings["peak_flops"])
        / float(ceilings["copy_bandwidth_Bps"]),
    }


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


def _get(rec: Any, key: str) -> int:
    v = rec[key] if isinstance(rec, Mapping) else getattr(rec, key)
    return int(v)


def annotate(
    launches: Iterable[Any], time_s: float | None, ceilings: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``perf`` object of one node.

    Args:
        launches: the node's launch records (``LaunchRecord`` or their JSON dicts).
        time_s: the node's measured time (GPU events, or the host timer on numpy); None when
            unmeasured (achieved rates are then null, the class still stands).
        ceilings: ``copy_bandwidth_Bps``, ``launch_overhead_s``, ``peak_flops``.

    Returns:
        ``bytes``, ``flops``, ``launches``, ``intensity``, ``achieved_Bps``, ``achieved_flops``,
        ``fraction_of_ceiling``, ``bound`` (``launch``/``bandwidth``/``compute``, or None for a
        node without launches) and ``reason`` (the verdict with its numbers).
    """
    recs = list(launches)
    nbytes = sum(_get(r, "bytes_read") + _get(r, "bytes_written") for r in recs)
    flops = sum(_get(r, "flops") for r in recs)
    bw = float(ceilings["copy_bandwidth_Bps"])
    peak = float(ceilings["peak_flops"])
    launch = float(ceilings["launch_overhead_s"])
    ridge = peak / bw
    n = len(recs)
    t = float(time_s) if time_s is not None and time_s > 0 else None
    out: dict[str, Any] = {
        "bytes": nbytes,
        "flops": flops,
        "launches": n,
        "intensity": flops / nbytes if nbytes else None,
        "achieved_Bps": nbytes / t if t else None,
        "achieved_flops": flops / t if t else None,
        "fraction_of_ceiling": None,
        "bound": None,
        "reason": "no kernel launches: nothing to classify",
    }
    if n == 0:
        return out
    t_mem, t_flop, t_launch = nbytes / bw, flops / peak, n * launch
    cost = (
        f"{n} launches' {fmt_time(t_launch)}" if n > 1 else f"the {fmt_time(t_launch)} launch cost"
    )
    traffic = f"{fmt_bytes(nbytes)} at {fmt_rate(bw, 'B/s')}"
    if t_mem < t_launch and t_flop < t_launch:
        out["bound"] = "launch"
        out["fraction_of_ceiling"] = t_launch / t if t else None
        extra = f" ({fmt_rate(flops, 'flop')} at peak: {fmt_time(t_flop)})" if flops else ""
        out["reason"] = f"{traffic} would take {fmt_time(t_mem)}{extra}, under {cost}: launch-bound"
        return out
    intensity = out["intensity"] or 0.0
    ran = f"; ran {fmt_time(t)}" if t else ""
    if intensity < ridge:
        out["bound"] = "bandwidth"
        if t:
            out["fraction_of_ceiling"] = out["achieved_Bps"] / bw
            ran += (
                f" = {fmt_rate(out['achieved_Bps'], 'B/s')} = "
                f"{100 * out['fraction_of_ceiling']:.3g}% of copy BW"
            )
        out["reason"] = (
            f"{intensity:.3g} flop/B < {ridge:.3g} ridge; {traffic}: {fmt_time(t_mem)} > "
            f"{cost}: bandwidth-bound{ran}"
        )
        return out
    out["bound"] = "compute"
    if t:
        out["fraction_of_ceiling"] = out["achieved_flops"] / peak
        ran += (
            f" = {fmt_rate(out['achieved_flops'], 'flop/s')} = "
            f"{100 * out['fraction_of_ceiling']:.3g}% of peak"
        )
    out["reason"] = (
        f"{intensity:.3g} flop/B >= {ridge:.3g} ridge; {fmt_rate(flops, 'flop')} at "
        f"{fmt_rate(peak, 'flop/s')}: {fmt_time(t_flop)}: compute-bound{ran}"
    )
    return out
