"""A matvec launch's own device time split into a fixed cost and a rate, from the same kernel
timed at two or more sizes of one row length (``scripts/bench_mmvq_staged.py --shapes
14336x4096,57344x4096 --json J``; gpu_check_s6.sh's ``scale`` stage):

    own time = fixed + bytes / rate        (least squares over the sizes)

per type for mmvq, mmvq_st (each at its default geometry) and the read floor (a plain 16-byte
stream of the same bytes). Why: at 14336 x 4096 no type's kernel reached 85% of copy, while at
four times the rows mmvq_st ran at 92-97% (H100, 2026-12-07): the gap is a cost each launch
pays once (its first tiles' arrival, its last tiles' compute), not its streaming rate. The last
column is the fixed cost the 85% target leaves a launch of the smallest size at the fitted
rate (negative: the rate alone misses it).

    .venv/bin/python scripts/launch_fixed_cost.py scale.json
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

#: issue 13's target: a quantized matvec at >= 85% of copy bandwidth on a 14336 x 4096 weight
TARGET = 0.85


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(fixed seconds, bytes per second) of ``t = fixed + bytes / rate`` through the (bytes,
    seconds) points, least squares; two or more distinct sizes."""
    if len({b for b, _ in points}) < 2:
        raise ValueError(f"a fit needs two sizes or more, got {sorted({b for b, _ in points})}")
    n = len(points)
    mb = sum(b for b, _ in points) / n
    mt = sum(t for _, t in points) / n
    slope = sum((b - mb) * (t - mt) for b, t in points) / sum((b - mb) ** 2 for b, _ in points)
    if slope <= 0:
        raise ValueError(f"time does not grow with the bytes (slope {slope:.3g} s/B)")
    return mt - slope * mb, 1.0 / slope


def table(doc: dict) -> list[str]:
    """The markdown rows of a bench_mmvq_staged JSON: type, kernel, k, sizes, rate (GB/s and %
    of copy), fixed cost (µs) and the fixed cost the target allows at the smallest size."""
    copy = float(doc["copy_GBps"]) * 1e9
    groups: dict[tuple[str, str, int], list[tuple[float, float]]] = defaultdict(list)
    for r in doc["rows"]:
        if r.get("own_us") is None or "bytes" not in r:
            continue
        if r["kind"] == "floor":
            name = "read floor"
        elif r.get("default"):
            name = "mmvq_st" if r["kind"] == "st" else "mmvq"
        else:
            continue  # a sweep's configuration: timed queued only
        groups[(r["type"], name, r["k"])].append((float(r["bytes"]), r["own_us"] * 1e-6))
    out = [
        "| type | kernel | k | MB | rate GB/s (% of copy) | fixed µs | fixed the 85% target "
        "allows at the smallest, µs |",
        "|---|---|---|---|---|---|---|",
    ]
    for (t, name, k), pts in groups.items():
        if len({b for b, _ in pts}) < 2:
            continue
        sizes = " / ".join(f"{b / 1e6:.1f}" for b in sorted({b for b, _ in pts}))
        try:
            fixed, rate = fit(pts)
        except ValueError as e:  # (noisy times: said, not fitted)
            out.append(f"| {t} | {name} | {k} | {sizes} | no fit: {e} | – | – |")
            continue
        small = min(b for b, _ in pts)
        allowed = small / (TARGET * copy) - small / rate
        out.append(
            f"| {t} | {name} | {k} | {sizes} | {rate / 1e9:.0f} ({100 * rate / copy:.1f}) | "
            f"{fixed * 1e6:.2f} | {allowed * 1e6:.2f} |"
        )
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.exit("usage: launch_fixed_cost.py BENCH_JSON (scripts/bench_mmvq_staged.py --json)")
    doc = json.loads(Path(argv[0]).read_text())
    print(f"copy bandwidth {float(doc['copy_GBps']):.0f} GB/s; own device times")
    print("\n".join(table(doc)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
