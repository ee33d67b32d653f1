"""Each quantized type's matrix-vector node at 14336 x 4096, tracekit's against llama.cpp's, both
timed by Nsight Compute on the same GPU (scripts/llama_matvec_peer.sh runs the whole check).

    python3 scripts/matvec_peer.py ours [--types Q4_0,...] > ours.json   # run under ncu
    python3 scripts/matvec_peer.py report ours.json ours.csv llama-*.csv  # the table

``ours`` launches, per type, the engine's matvec node (matvec.launch_matvec as the quant path
runs it: its declared kernel, with quantize_q8 before it where the type quantizes x in its own
launch) twice, the first to compile, and prints the kernel names of one call as JSON. ncu
(``--cache-control all``: L2 flushed before each kernel; ``--clock-control none``) times every
kernel's gpu__time_duration. llama.cpp's node is test-backend-ops' MUL_MAT perf case at the same
shape (m = 14336 rows, k = 4096, one token), one ncu run a type profiling its first call's
launches (quantize_q8_1 and mul_mat_vec_q).
``report`` sums each node's launches and prints % of the copy bandwidth measured in the same
call (ceilings.measure_ceilings) for the GGUF bytes of the weight, and tracekit ÷ llama.cpp
time. The issue's target is 85% for every type.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPE = (14336, 4096)
TYPES = "Q4_0,Q4_1,Q5_0,Q5_1,Q8_0,Q2_K,Q3_K,Q4_K,Q5_K,Q6_K,IQ4_NL,IQ4_XS"
#: ggml's enum ggml_type values of these types (ggml.h), as mul_mat_vec_q's template names them
GGML_TYPE = {2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 10: "Q2_K", 11: "Q3_K",
             12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 20: "IQ4_NL", 23: "IQ4_XS"}  # fmt: skip
OURS = re.compile(r"^(mmvq|quantize_q8|matvec)")
LLAMA = re.compile(r"mul_mat_vec|quantize_q8_1")


def run_ours(types: list[str]) -> int:
    import cupy as cp

    from tracekit.kernels import matvec
    from tracekit.quants import quant_type

    n, k = SHAPE
    for name in types:
        qt = quant_type(name)
        nbytes = qt.nbytes(SHAPE)
        raw = cp.random.randint(0, 2**31 - 1, -(-nbytes // 4), dtype=cp.int32).view(cp.uint8)
        x = cp.random.standard_normal((1, k), dtype=cp.float32)
        out = cp.empty((1, n), cp.float32)
        recs = []
        for _ in range(2):  # the first compiles
            _, recs = matvec.launch_matvec(x, raw[:nbytes], qt, SHAPE, out)
        cp.cuda.get_current_stream().synchronize()
        print(json.dumps({"type": name, "bytes": nbytes, "kernels": [r.kernel for r in recs]}))
    return 0


def ncu_rows(path: Path, pattern: re.Pattern[str]) -> list[tuple[str, float]]:
    """(kernel name, gpu__time_duration in s) of each profiled kernel matching, in order."""
    text = path.read_text()
    start = text.find('"ID"')  # ncu's log lines come before the CSV
    if start < 0:
        raise ValueError(f'{path}: no ncu CSV header ("ID",...) in it')
    rows = list(csv.DictReader(text[start:].splitlines()))
    out = []
    for row in rows[1:] if rows and not rows[0].get("ID", "").isdigit() else rows:  # units row
        name = row.get("Kernel Name", "")
        value = row.get("gpu__time_duration.sum", "")
        if pattern.search(name) and value:
            out.append((name, float(value.replace(",", "")) * 1e-9))  # base units: ns
    return out


def ours_times(ours: list[dict], rows: list[tuple[str, float]]) -> dict[str, float]:
    """Per type, its node's second call: the kernels ``ours`` launched, in launch order."""
    times, i = {}, 0
    for entry in ours:
        kernels = entry["kernels"]
        calls = rows[i : i + 2 * len(kernels)]
        i += 2 * len(kernels)
        names = [name for name, _ in calls]
        if [n.split("(")[0] for n in names] != kernels * 2:
            raise ValueError(f"{entry['type']}: ncu profiled {names}, expected {kernels} twice")
        times[entry["type"]] = sum(t for _, t in calls[len(kernels) :])
    return times


def llama_times(rows: list[tuple[str, float]]) -> dict[str, float]:
    """Per type, quantize_q8_1 + mul_mat_vec_q (the first of each type's nodes)."""
    times, pending = {}, 0.0
    for name, t in rows:
        if "quantize_q8_1" in name:
            pending += t
            continue
        m = re.search(r"mul_mat_vec_q<(?:\(ggml_type\))?(\d+)", name)
        if not m:
            raise ValueError(f"cannot tell the type of llama.cpp's kernel {name[:120]!r}")
        qname = GGML_TYPE.get(int(m.group(1)))
        if qname and qname not in times:
            times[qname] = pending + t
        pending = 0.0
    return times


def report(ours_json: Path, ours_csv: Path, llama_csvs: list[Path]) -> int:
    from tracekit.kernels.ceilings import measure_ceilings

    ours = [json.loads(line) for line in ours_json.read_text().splitlines() if line.strip()]
    mine = ours_times(ours, ncu_rows(ours_csv, OURS))
    peer = {}
    for path in llama_csvs:  # (one a type)
        peer.update(llama_times(ncu_rows(path, LLAMA)))
    copy = measure_ceilings("cupy", force=True)["copy_bandwidth_Bps"]
    print(f"copy {copy / 1e9:.0f} GB/s; {SHAPE[0]} x {SHAPE[1]}, one token; ncu "
          "gpu__time_duration, L2 flushed before each kernel")  # fmt: skip
    print(
        "| type | tracekit kernels | µs | % of copy | llama.cpp µs | % of copy | llama ÷ tracekit |"
    )
    print("|---|---|---|---|---|---|---|")
    for entry in ours:
        name, nbytes = entry["type"], entry["bytes"]
        t = mine[name]
        p = peer.get(name)
        peer_cols = (f"{p * 1e6:.2f} | {nbytes / p / copy * 100:.1f} | {p / t:.2f}×"
                     if p else "– | – | –")  # fmt: skip
        print(f"| {name} | {' + '.join(entry['kernels'])} | {t * 1e6:.2f} | "
              f"{nbytes / t / copy * 100:.1f} | {peer_cols} |")  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("ours", help="launch each type's node twice (under ncu)")
    o.add_argument("--types", default=TYPES)
    r = sub.add_parser("report", help="the table from ours' JSON and the two ncu CSVs")
    r.add_argument("ours_json", type=Path)
    r.add_argument("ours_csv", type=Path)
    r.add_argument("llama_csvs", type=Path, nargs="+")
    args = ap.parse_args(argv)
    if args.cmd == "ours":
        return run_ours(args.types.split(","))
    return report(args.ours_json, args.ours_csv, args.llama_csvs)


if __name__ == "__main__":
    raise SystemExit(main())
