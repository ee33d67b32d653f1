"""The bound model's report on a decode step, with and without CUDA graphs (issue 11's check).

    python3 scripts/bound_report.py [--backend cupy] [--steps 8] [--pdl auto|on|off] [--out DIR] MODEL...

MODEL is a GGUF path, ``demo`` or a synthetic benchmark model's name (``qwen2-0.5b``, written
once into the tracekit cache). Per model, it records a timing-capture trace of a short prompt
and ``--steps`` decode steps in each launch mode (no graphs; ``--cuda-graph`` on cupy), loads
it back (verdicts derived on load) and prints, for the last decode step of each mode:

- the class counts (launch / bandwidth / compute) and the flagged nodes;
- the idle breakdown (kernel time, host wait, other gaps, span, residual);
- the ten lowest-efficiency nodes with their reasons;
- the output matmul's verdict (bandwidth-bound on the GPU, or the check fails);

then, on cupy, each node's time without graphs against with graphs (the fraction of nodes
within 15%, the worst ones), from a third trace recorded with ``alternate_modes`` (one
session's decode steps alternating graph and stream replays of the same recorded step: the
same buffers, so only the launch mode differs; per node, ``perf.alternating_mode_ratios``).
The two separate traces are compared too, for information: their buffers lie elsewhere, and
a one-block kernel's time follows them (scripts/placement_effect.py). It exits 1 when a check
of the issue's acceptance fails: the output node not bandwidth-bound, a breakdown off by more
than its tolerance, or fewer than all nodes of the alternating trace within 15%.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from decode_speed import resolve  # noqa: E402

from tracekit.trace.perf import (  # noqa: E402
    MODE_AGREEMENT,
    alternating_mode_ratios,
    replayed_node_times,
)

PROMPT = [3, 17, 42, 7, 99, 5, 11, 23]


def record(
    model: Path,
    backend: str,
    steps: int,
    graph: bool,
    out: Path,
    alternate: bool = False,
    pdl: bool | None = None,
) -> dict[str, Any]:
    from tracekit.runner.record import record_trace
    from tracekit.trace.format import load_trace

    path = record_trace(
        model, tokens=PROMPT, steps=steps, backend=backend, capture="timing", output=out,
        nvtx=False, cuda_graph=graph, progress=False, alternate_modes=alternate,
        pdl=pdl if graph else None,
    )  # fmt: skip
    return load_trace(path)


def report(trace: dict[str, Any], mode: str) -> list[str]:
    """The report lines of the trace's last decode step; failures start with 'FAIL'."""
    from tracekit.trace.perf import fmt_time

    step = trace["steps"][-1]
    nodes, recs = trace["nodes"], step["nodes"]
    label = trace["derived"]["time_label"]
    lines = [f"--- {trace['model']['name']} · {mode} · {step['name']} ({step.get('launch_mode')})"]
    counts: dict[str, int] = {}
    for r in recs:
        counts[r["perf"]["bound"] or "none"] = counts.get(r["perf"]["bound"] or "none", 0) + 1
    flagged = [r for r in recs if r["perf"]["flag"]]
    over = [r for r in recs if (r["perf"]["efficiency"] or 0) > 1 and not r["perf"]["flag"]]
    lines.append(
        "classes: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        + f" · flagged {len(flagged)} · efficiency in (1, 1+tol] shown as 100%: {len(over)}"
    )  # fmt: skip
    b = step["breakdown"]
    if b:
        lines.append(
            f"breakdown: span {fmt_time(b['span_s'])} = kernels {fmt_time(b['kernel_s'])} + "
            f"host wait {fmt_time(b['host_wait_s'])} + other gaps {fmt_time(b['other_gap_s'])}"
            f" (residual {b['residual_s'] * 1e6:.3g} µs, tolerance {100 * b['tolerance']:.0f}%)"
        )
        if not b["within_tolerance"]:
            lines.append("FAIL: the breakdown does not add up to the span within its tolerance")
    else:
        lines.append("breakdown: none (no intervals)")
    lines.append(
        f"{label} of the nodes: {fmt_time(step['gpu_s'])} · wall {fmt_time(step['wall_s'])}"
    )
    ranked = sorted(
        (r for r in recs if r["perf"]["efficiency"] is not None),
        key=lambda r: r["perf"]["efficiency"],
    )
    lines.append("ten lowest-efficiency nodes:")
    for r in ranked[:10]:
        p = r["perf"]
        lines.append(
            f"  {nodes[r['id']]['name']:<22} {100 * p['efficiency']:6.3g}%  "
            f"{fmt_time(r['time_s']):>9}  {p['reason']}"
        )
    for r in flagged:
        lines.append(f"  flagged {nodes[r['id']]['name']}: {r['perf']['flag']}")
    out = next((r for r in recs if nodes[r["id"]]["name"] == "output"), None)
    if out is not None:
        lines.append(f"output: {out['perf']['reason']}")
        # the acceptance is the GPU's: a CPU's f32 matmul peak is low enough that a small
        # model's output GEMV can be compute-bound there
        if out["perf"]["bound"] != "bandwidth" and trace["run"]["backend"] == "cupy":
            lines.append("FAIL: the output matmul is not bandwidth-bound")
    return lines


def replayed_medians(t: dict[str, Any], mode: str | None = None) -> dict[int, float]:
    """Per node id, the median of its times over the replayed decode steps
    (``perf.replayed_node_times``): one ~1 µs sample varies by 10-20%."""
    return {i: statistics.median(v) for i, v in replayed_node_times(t, mode).items()}


def agreement(a: dict[str, Any], b: dict[str, Any], check: bool = True) -> list[str]:
    """Node times without graphs (a) against with graphs (b), two traces: per node, the median
    over the replayed decode steps. ``check`` False: nodes apart are listed, not failed (two
    sessions' buffers lie elsewhere)."""
    ma, mb = replayed_medians(a), replayed_medians(b)
    ratios = {i: ma[i] / mb[i] for i in ma if mb.get(i, 0) > 0}
    return _agreement(a, (None, None), b, ratios, check=check)


def alternating_agreement(t: dict[str, Any]) -> list[str]:
    """Node times of one alternating trace's stream steps against the graph steps either side
    of each (``perf.alternating_mode_ratios``)."""
    return _agreement(t, ("stream", "graph"), t, alternating_mode_ratios(t),
                      "in one session, on the same buffers")  # fmt: skip


def _agreement(
    a: dict[str, Any],
    modes: tuple[str | None, str | None],
    b: dict[str, Any],
    by_id: dict[int, float],
    how: str = "",
    check: bool = True,
) -> list[str]:
    ratios = [(q, a["nodes"][i]["name"]) for i, q in by_id.items()]
    ok = sum(1 for q, _ in ratios if abs(q - 1) <= MODE_AGREEMENT)
    worst = sorted(ratios, key=lambda qn: -abs(qn[0] - 1))[:5]
    lines = [
        f"node time without / with graphs{' (' + how + ')' if how else ''}: {ok} of "
        f"{len(ratios)} within {100 * MODE_AGREEMENT:.0f}%; "
        "worst: " + ", ".join(f"{n} {q:.3g}x" for q, n in worst)
    ]
    if ok < len(ratios):
        # each node outside the tolerance with its samples, to tell a mode effect (every
        # sample apart) from a bimodal one (some samples apart)
        sa, sb = replayed_node_times(a, modes[0]), replayed_node_times(b, modes[1])
        index = {n["name"]: n["id"] for n in a["nodes"]}
        for q, name in ratios:
            if abs(q - 1) > MODE_AGREEMENT:
                i = index[name]
                lines.append(
                    f"  {name}: without graphs "
                    + " ".join(f"{v * 1e6:.2f}" for v in sa[i])
                    + " us; with graphs "
                    + " ".join(f"{v * 1e6:.2f}" for v in sb[i])
                    + " us"
                )
        lines.append(
            "FAIL: node times depend on who launched the kernels"
            if check
            else "(not a check: each session's buffers lie elsewhere, and a one-block "
            "kernel's time follows them)"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--backend", default="cupy")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--out", type=Path, default=None, help="keep the traces in this folder")
    ap.add_argument(
        "--pdl",
        choices=("auto", "on", "off"),
        default="auto",
        help="the graphs' programmatic dependent launches (record_trace's pdl)",
    )
    args = ap.parse_args(argv)
    failed = False
    pdl = {"auto": None, "on": True, "off": False}[args.pdl]
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.out or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for name in args.models:
            path = resolve(name)
            modes = [False, True] if args.backend == "cupy" else [False]
            traces = {}
            for graph in modes:
                mode = "cuda-graph" if graph else "no graph"
                out = (
                    folder
                    / f"bound-{Path(name).stem}-{args.backend}{'-graph' if graph else ''}.json"
                )
                traces[graph] = record(path, args.backend, args.steps, graph, out, pdl=pdl)
                lines = report(traces[graph], mode)
                print("\n".join(lines), flush=True)
                failed |= any(x.startswith("FAIL") for x in lines)
            if len(traces) == 2:
                # two sessions, their buffers elsewhere: for information, not a check
                lines = agreement(traces[False], traces[True], check=False)
                print("separate sessions: " + "\n".join(lines), flush=True)
                alt = record(path, args.backend, 2 * args.steps + 1, True,
                             folder / f"bound-{Path(name).stem}-{args.backend}-alternate.json",
                             alternate=True, pdl=pdl)  # fmt: skip
                lines = alternating_agreement(alt)
                print("\n".join(lines), flush=True)
                failed |= any(x.startswith("FAIL") for x in lines)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
