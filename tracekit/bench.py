"""``tracekit bench``: kernel throughput as ratios measured in one run.

Every figure is relative to something measured in the same process: the device's copy
bandwidth (a large device-to-device copy), the time of an empty kernel, torch's ``add``
where torch sees the GPU, ``gguf.quants.dequantize`` on the CPU. Per kernel: median time over
CUDA events after warm-up (inputs rotated through enough buffer sets to exceed twice the L2,
so no timing reads a warm cache), bytes moved (from the launch records, which count them from
the real arrays), GB/s, % of copy, the target and whether it was met. No absolute time is ever
asserted anywhere.

    tracekit bench [--backend auto|cupy|numpy] [--json OUT] [--only PATTERN] [--quick]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import fnmatch
import json
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from tracekit.kernels.ceilings import gpu_times_queued, host_times, median
from tracekit.kernels.launch import LaunchRecord
from tracekit.quants import QUANT_TABLE, QUANTIZED_TYPES, QuantType

BENCH_FORMAT = "tracekit-bench"
BENCH_VERSION = 1


@dataclass
class Row:
    """One line of the table (and of the JSON ``rows``)."""

    kernel: str
    shape: str
    time_us: float | None
    bytes: int
    GBps: float | None
    pct_copy: float | None
    target: str
    met: bool | None
    ratio: float | None = None  # the value the target is stated in, when it is not % of copy
    note: str = ""


@dataclass
class Sizes:
    """Problem sizes and repetitions; ``--quick`` shrinks them (smoke runs, CI)."""

    dequant_bytes: int
    elementwise_n: int
    embed_vocab: int
    embed_dim: int
    copy_bytes: int
    warmup: int
    iters: int
    cpu_dequant_bytes: int
    cpu_elementwise_n: int


FULL = Sizes(256 * 2**20, 64 * 2**20, 32768, 4096, 512 * 2**20, 3, 20, 16 * 2**20, 16 * 2**20)
QUICK = Sizes(32 * 2**20, 4 * 2**20, 8192, 2048, 64 * 2**20, 1, 5, 2**18, 2**18)


def _total_bytes(recs: LaunchRecord | list[LaunchRecord]) -> int:
    recs = recs if isinstance(recs, list) else [recs]
    return sum(r.bytes_read + r.bytes_written for r in recs)


def _selected(name: str, only: str | None) -> bool:
    if not only:
        return True
    if any(c in only for c in "*?["):
        return fnmatch.fnmatch(name, only)
    return only.lower() in name.lower()


def _row(
    kernel: str,
    shape: tuple[int, ...],
    seconds: float,
    nbytes: int,
    copy_bps: float,
    target: str = "",
    met: bool | None = None,
    ratio: float | None = None,
    note: str = "",
) -> Row:
    bps = nbytes / seconds if seconds > 0 else None
    return Row(
        kernel=kernel,
        shape="x".join(str(s) for s in shape),
        time_us=seconds * 1e6,
        bytes=int(nbytes),
        GBps=None if bps is None else bps / 1e9,
        pct_copy=None if bps is None else 100.0 * bps / copy_bps,
        target=target,
        met=met,
        ratio=ratio,
        note=note,
    )


def _shown(x: float) -> float:
    """A ratio rounded once, as the table prints it (2 decimals): the verdict is taken on this
    value, so the table never says ``got 3.00x ... NO``."""
    return round(x, 2)


def _pct_target(row: Row, pct: float) -> Row:
    row.target = f">= {pct:.0f}% of copy"
    row.met = row.pct_copy is not None and round(row.pct_copy, 1) >= pct  # as shown (.1f)
    return row


class _LiveRows(list):  # type: ignore[type-arg]
    """The rows of a run, each handed to ``on_row`` as it is added (its verdict is final
    then): ``tracekit bench`` prints rows as they are measured instead of after ~50 s."""

    def __init__(self, on_row: Callable[[Row], Any] | None) -> None:
        super().__init__()
        self.on_row = on_row

    def append(self, row: Row) -> None:
        super().append(row)
        if self.on_row is not None:
            self.on_row(row)

    def extend(self, rows: Any) -> None:
        for r in rows:
            self.append(r)

    def __iadd__(self, rows: Any) -> _LiveRows:
        self.extend(rows)
        return self


# -- GPU ----------------------------------------------------------------------------------------
class _Gpu:
    """Timing context of one GPU run: sizes, L2 size, the copy bandwidth and empty-kernel time."""

    def __init__(self, sizes: Sizes) -> None:
        import cupy

        self.cp = cupy
        self.sizes = sizes
        self.l2 = int(cupy.cuda.Device().attributes.get("L2CacheSize", 64 * 2**20))
        self.copy_bps = 0.0
        self.empty_s = 0.0
        self.floor_s = 0.0  # fill_f32 writing a 30-token embed's output: the store floor

    def sets(self, nbytes: int) -> int:
        """Buffer sets to rotate through so the working set exceeds twice the L2 (at most 8)."""
        return max(1, min(8, -(-2 * self.l2 // max(nbytes, 1))))

    def time(self, fn: Callable[[int], Any]) -> float:
        """Median device time per call, launches queued behind a spin kernel so that the host's
        launch overhead stays out (it is the ceiling's launch cost, measured on its own)."""
        return median(gpu_times_queued(fn, launches=self.sizes.iters, warmup=self.sizes.warmup))

    def measure(self, kernel: str, shape: tuple[int, ...], fn: Callable[[int], Any]) -> Row:
        """One launch for its records (bytes moved), then the timed runs."""
        _, recs = fn(0)
        row = _row(kernel, shape, self.time(fn), _total_bytes(recs), self.copy_bps)
        self.cp.get_default_memory_pool().free_all_blocks()  # the caller's buffers die next
        return row

    def random_bytes(self, n: int) -> Any:
        """n random bytes on the device (the values do not change a dequant's speed)."""
        cp = self.cp
        words = cp.random.randint(0, 2**31 - 1, size=-(-n // 4), dtype=cp.int32)
        return words.view(cp.uint8)[:n]


def _gpu_copy_row(gpu: _Gpu) -> Row:
    """cudaMemcpyAsync device-to-device: the bandwidth every % of copy is relative to."""
    cp, nbytes = gpu.cp, gpu.sizes.copy_bytes
    src = cp.ones(nbytes // 4, dtype=cp.float32)
    dst = cp.empty_like(src)
    s = gpu.time(lambda i: dst.data.copy_from_device_async(src.data, src.nbytes))
    gpu.copy_bps = 2 * src.nbytes / s
    return _row("copy (cudaMemcpy D2D)", (src.nbytes,), s, 2 * src.nbytes, gpu.copy_bps)


def _gpu_dequant_row(gpu: _Gpu, qt: QuantType) -> Row:
    """>= 256 MB of packed weights (rows of 4096 elements) to f16; target 90% of copy."""
    from tracekit.kernels import dequant

    row_len = 4096
    shape = (max(1, gpu.sizes.dequant_bytes // qt.row_bytes(row_len)), row_len)
    raw = gpu.random_bytes(qt.nbytes(shape))
    out = gpu.cp.empty(shape, gpu.cp.float16)
    row = gpu.measure(
        dequant.kernel_name(qt),
        shape,
        lambda i: dequant.launch_dequantize_f16(raw, qt, shape, out=out),
    )
    return _pct_target(row, 90)


def _torch_add_bps(gpu: _Gpu, n: int) -> tuple[float | None, str]:
    """Bytes/s of torch.add on n floats (3 arrays moved), or None and why not."""
    try:
        import torch
    except ImportError:
        return None, "torch not installed"
    if not torch.cuda.is_available():
        return None, "torch has no CUDA device"
    k = gpu.sets(3 * n * 4)
    xs = [torch.ones(n, device="cuda") for _ in range(k)]
    ys = [torch.ones(n, device="cuda") for _ in range(k)]
    zs = [torch.empty(n, device="cuda") for _ in range(k)]
    for i in range(gpu.sizes.warmup):
        torch.add(xs[i % k], ys[i % k], out=zs[i % k])
    ts = []
    for i in range(gpu.sizes.iters):  # torch's own stream and events
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        torch.add(xs[i % k], ys[i % k], out=zs[i % k])
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e-3)
    return 3 * n * 4 / median(ts), "torch.add"


def _gpu_elementwise_rows(gpu: _Gpu, only: str | None) -> tuple[list[Row], float | None]:
    """add/mul/silu (target: >= torch.add's GB/s), add_bias, convert_f32_f16 (90% of copy)."""
    from tracekit.kernels import elementwise as ew

    cp, n = gpu.cp, gpu.sizes.elementwise_n
    rows: list[Row] = []
    torch_bps, why = None, ""
    if any(_selected(k, only) for k in ("add_f32", "mul_f32", "silu_f32", "torch.add")):
        torch_bps, why = _torch_add_bps(gpu, n)
        if torch_bps is not None:
            rows.append(_row("torch.add", (n,), 3 * n * 4 / torch_bps, 3 * n * 4, gpu.copy_bps))
    k = gpu.sets(3 * n * 4)
    xs = [cp.random.standard_normal(n, dtype=cp.float32) for _ in range(k)]
    ys = [cp.random.standard_normal(n, dtype=cp.float32) for _ in range(k)]
    zs = [cp.empty(n, dtype=cp.float32) for _ in range(k)]
    ops: dict[str, Callable[[int], Any]] = {
        "add_f32": lambda i: ew.launch_add_f32(xs[i % k], ys[i % k], out=zs[i % k]),
        "mul_f32": lambda i: ew.launch_mul_f32(xs[i % k], ys[i % k], out=zs[i % k]),
        "silu_f32": lambda i: ew.launch_silu_f32(xs[i % k], out=zs[i % k]),
    }
    for name, fn in ops.items():
        if not _selected(name, only):
            continue
        row = gpu.measure(name, (n,), fn)
        row.target = ">= 1.0x torch.add GB/s"
        if torch_bps is not None and row.GBps is not None:
            row.ratio = _shown(row.GBps * 1e9 / torch_bps)
            row.met = row.ratio >= 1.0
        else:
            row.note = why
        rows.append(row)
    d = 4096  # add_bias: one block row per token (seed §3.1), n / d tokens
    if _selected("add_bias_f32", only):
        b = cp.random.standard_normal(d, dtype=cp.float32)
        ys2, zs2 = [y.reshape(-1, d) for y in ys], [z.reshape(-1, d) for z in zs]
        row = gpu.measure(
            "add_bias_f32",
            (n // d, d),
            lambda i: ew.launch_add_bias_f32(ys2[i % k], b, out=zs2[i % k]),
        )
        row.note = "no target"
        rows.append(row)
    if _selected("convert_f32_f16", only):
        hs = [cp.empty(n, dtype=cp.float16) for _ in range(k)]
        row = gpu.measure(
            "convert_f32_f16", (n,), lambda i: ew.launch_convert_f32_f16(xs[i % k], out=hs[i % k])
        )
        rows.append(_pct_target(row, 90))
    return rows, torch_bps


def _gpu_embed_rows(gpu: _Gpu, qt: QuantType) -> list[Row]:
    """Gather 4096 rows (target 70% of copy) and 30 rows (launch-bound by design, seed §4.2:
    target within 1.2x of the empty kernel's time) from a [vocab, dim] table of ``qt``."""
    from tracekit.kernels import embed

    cp, vocab, dim = gpu.cp, gpu.sizes.embed_vocab, gpu.sizes.embed_dim
    name = f"embed_rows_{qt.suffix}"
    launch = getattr(embed, "launch_embed_rows", None)
    if launch is None:
        return [Row(name, "-", None, 0, None, None, "", None, note="launch_embed_rows missing")]
    raw = gpu.random_bytes(qt.nbytes((vocab, dim)))
    rng = np.random.default_rng(0)
    rows = []
    for nt in (4096, 30):
        k = gpu.sets(nt * dim * 4) if nt > 30 else 1
        ids = [cp.asarray(rng.integers(0, vocab, nt, dtype=np.int32)) for _ in range(k)]
        outs = [cp.empty((nt, dim), cp.float32) for _ in range(k)]
        row = gpu.measure(
            name,
            (nt, dim),
            lambda i, ids=ids, outs=outs, k=k: launch(
                raw, qt, (vocab, dim), ids[i % k], out=outs[i % k], ids_checked=True
            ),
        )
        if nt > 30:
            rows.append(_pct_target(row, 70))
        else:
            row.ratio = _shown((row.time_us or 0.0) * 1e-6 / gpu.empty_s)
            row.target = "<= 1.2x empty kernel time"
            row.met = row.ratio <= 1.2
            if gpu.floor_s:
                row.note = f"store floor {gpu.floor_s / gpu.empty_s:.2f}x empty"
            rows.append(row)
    return rows


def _gpu_store_floor_row(gpu: _Gpu) -> Row:
    """A kernel that only writes a 30-token embed's output (fill_f32, no loads): no gather of
    30 rows can take less device time, so its ratio to the empty kernel bounds theirs."""
    from tracekit.kernels import elementwise

    out = gpu.cp.empty((30, gpu.sizes.embed_dim), gpu.cp.float32)
    row = gpu.measure("fill_f32 (store floor)", tuple(out.shape),
                      lambda i: (None, elementwise.launch_fill_f32(out)))  # fmt: skip
    gpu.floor_s = (row.time_us or 0.0) * 1e-6
    row.ratio = _shown(gpu.floor_s / gpu.empty_s)
    row.note = "writes a 30-token embed's output, nothing else"
    return row


def _gpu_gather_row(gpu: _Gpu) -> Row:
    """The plain f32 row gather at 4096 tokens: target 70% of copy."""
    from tracekit.kernels import embed

    cp, vocab, dim, nt = gpu.cp, gpu.sizes.embed_vocab, gpu.sizes.embed_dim, 4096
    if not hasattr(embed, "launch_gather_rows_f32"):
        return Row("gather_rows_f32", "-", None, 0, None, None, "", None, note="missing")
    table = cp.random.standard_normal((vocab, dim), dtype=cp.float32)
    rng = np.random.default_rng(1)
    k = gpu.sets(nt * dim * 8)
    ids = [cp.asarray(rng.integers(0, vocab, nt, dtype=np.int32)) for _ in range(k)]
    outs = [cp.empty((nt, dim), cp.float32) for _ in range(k)]
    row = gpu.measure(
        "gather_rows_f32",
        (nt, dim),
        lambda i: embed.launch_gather_rows_f32(
            table, ids[i % k], out=outs[i % k], ids_checked=True
        ),
    )
    return _pct_target(row, 70)


def _gpu_rows(
    sizes: Sizes, only: str | None, on_row: Callable[[Row], Any] | None = None
) -> tuple[list[Row], dict[str, Any]]:
    from tracekit.kernels import elementwise

    gpu = _Gpu(sizes)
    rows = _LiveRows(on_row)
    rows.append(_gpu_copy_row(gpu))
    gpu.empty_s = gpu.time(lambda i: elementwise.launch_empty())
    rows.append(_row("empty_kernel", (1,), gpu.empty_s, 0, gpu.copy_bps, note="launch baseline"))
    if _selected("embed_rows_*", only):
        rows.append(_gpu_store_floor_row(gpu))
    f16, bf16 = (t for t in QUANT_TABLE.values() if t.name in ("F16", "BF16"))
    for qt in (*QUANTIZED_TYPES, f16, bf16):
        if _selected(f"dequant_{qt.suffix}_f16", only):
            rows.append(_gpu_dequant_row(gpu, qt))
    ew_rows, torch_bps = _gpu_elementwise_rows(gpu, only)
    rows += ew_rows
    for qt in (*QUANTIZED_TYPES, f16):
        if _selected(f"embed_rows_{qt.suffix}", only):
            rows += _gpu_embed_rows(gpu, qt)
    if _selected("gather_rows_f32", only):
        rows.append(_gpu_gather_row(gpu))
    extra = dict(
        copy_bandwidth_Bps=gpu.copy_bps, empty_kernel_s=gpu.empty_s, torch_add_Bps=torch_bps
    )
    return list(rows), extra


# -- CPU ----------------------------------------------------------------------------------------
def _gguf_speedup(qt: QuantType, n_bytes: int, raw: np.ndarray, ours_s: float) -> float:
    """gguf-py's dequantize time over ours on the same bytes (> 1: ours is faster)."""
    from tracekit.kernels import dequant

    fn = getattr(dequant, "cpu_speedup_vs_gguf", None)
    if fn is not None:
        return float(fn(qt, n_bytes))
    from gguf.quants import dequantize

    with np.errstate(all="ignore"):
        t = median(host_times(lambda i: dequantize(raw, qt.qtype), warmup=1, iters=3))
    return t / ours_s


def _cpu_copy_bps(nbytes: int) -> float:
    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    return 2 * src.nbytes / median(host_times(lambda i: np.copyto(dst, src), warmup=2, iters=7))


def _cpu_dequant_row(qt: QuantType, n_bytes: int, copy_bps: float) -> Row:
    """The CPU reference's dequant throughput, and its speed over gguf-py (target >= 3x)."""
    from tracekit.kernels import dequant

    n_blocks = max(1, n_bytes // qt.type_size)
    shape = (n_blocks * qt.block_size,)
    raw = dequant.random_blocks(qt, n_blocks, np.random.default_rng(0))
    # f32 out: what the CPU backend dequantizes its weights to (Backend.matmul_weight), and
    # what gguf.quants.dequantize returns, so the two are timed on the same work.
    _, rec = dequant.ref_dequantize_f32(raw, qt, shape)
    s = median(host_times(lambda i: dequant.ref_dequantize_f32(raw, qt, shape), 1, 3))
    row = _row(f"ref_dequantize_f32[{qt.name}]", shape, s, _total_bytes(rec), copy_bps)
    row.ratio = _shown(_gguf_speedup(qt, raw.nbytes, raw, s))
    row.target = ">= 3x gguf.quants.dequantize"
    row.met = row.ratio >= 3.0
    return row


def _cpu_rows(
    sizes: Sizes, only: str | None, on_row: Callable[[Row], Any] | None = None
) -> tuple[list[Row], dict[str, Any]]:
    from tracekit.kernels import elementwise as ew

    cb = sizes.copy_bytes // 8  # 64 MiB (8 MiB quick): past common last-level caches
    copy_bps = _cpu_copy_bps(cb)
    rows = _LiveRows(on_row)
    rows.append(
        _row(
            "copy (np.copyto)",
            (cb // 4,),  # the shape in f32 elements (was the byte count)
            2 * (cb // 4 * 4) / copy_bps,
            2 * (cb // 4 * 4),
            copy_bps,
        )
    )
    for qt in QUANTIZED_TYPES:
        if _selected(f"ref_dequantize_f32[{qt.name}]", only):
            rows.append(_cpu_dequant_row(qt, sizes.cpu_dequant_bytes, copy_bps))
    rng = np.random.default_rng(0)
    n = sizes.cpu_elementwise_n
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    ops: dict[str, Callable[[int], Any]] = {
        "add_f32": lambda i: ew.ref_add_f32(x, y),
        "mul_f32": lambda i: ew.ref_mul_f32(x, y),
        "silu_f32": lambda i: ew.ref_silu_f32(x),
        "convert_f32_f16": lambda i: ew.ref_convert_f32_f16(x),
    }
    for name, fn in ops.items():
        if _selected(f"ref_{name}", only):
            _, rec = fn(0)
            s = median(host_times(fn, 1, 5))
            rows.append(
                _row(f"ref_{name}", (n,), s, _total_bytes(rec), copy_bps, note="no target on CPU")
            )
    return list(rows), dict(copy_bandwidth_Bps=copy_bps)


# -- table + CLI --------------------------------------------------------------------------------
TABLE_HEAD = ("kernel", "shape", "µs", "GB/s", "% copy", "target", "met")
#: Column widths of the live table (rows print as they are measured, before all are known).
LIVE_WIDTHS = (34, 16, 10, 8, 7, 0, 0)


def _cells(r: Row) -> tuple[str, ...]:
    met = "-" if r.met is None else ("yes" if r.met else "NO")
    got = [f"got {r.ratio:.2f}x"] if r.ratio is not None else []
    if r.target and r.note:
        got.append(r.note)  # e.g. the 30-token embed's store floor next to its ratio
    label = r.target or r.note
    target = f"{label} ({'; '.join(got)})" if got else label
    return (
        r.kernel,
        r.shape,
        "-" if r.time_us is None else f"{r.time_us:.1f}",
        "-" if r.GBps is None else f"{r.GBps:.1f}",
        "-" if r.pct_copy is None else f"{r.pct_copy:.1f}",
        target or "-",
        met,
    )


def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
    return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()


def format_row(row: Row | None = None) -> str:
    """One line of the live table (the header for None), in :data:`LIVE_WIDTHS`."""
    return _line(TABLE_HEAD if row is None else _cells(row), LIVE_WIDTHS)


def format_table(rows: list[Row]) -> str:
    """The rows as a fixed-width text table."""
    lines = [TABLE_HEAD, *(_cells(r) for r in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(TABLE_HEAD))]
    return "\n".join(_line(line, widths) for line in lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tracekit bench",
        description="Kernel throughput as ratios to the device's copy bandwidth, measured in one run.",
    )
    p.add_argument("--backend", default="auto", choices=("auto", "cupy", "numpy"))
    p.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    p.add_argument(
        "--only", metavar="PATTERN", help="kernels whose name contains PATTERN (or matches a glob)"
    )
    p.add_argument(
        "--quick", action="store_true", help="small sizes and few repetitions (smoke run)"
    )
    return p


def run_bench(
    backend: str = "auto",
    only: str | None = None,
    quick: bool = False,
    on_row: Callable[[Row], Any] | None = None,
) -> dict[str, Any]:
    """Run the benchmark and return the JSON-ready result (``rows`` plus the run's context);
    ``on_row`` gets each row as soon as it is measured."""
    from tracekit.kernels.backend import get_backend

    b = get_backend(backend)
    sizes = QUICK if quick else FULL
    rows, extra = (_gpu_rows if b.name == "cupy" else _cpu_rows)(sizes, only, on_row)
    return dict(
        format=BENCH_FORMAT,
        version=BENCH_VERSION,
        date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        device=b.device_name(),
        backend=b.name,
        quick=quick,
        **extra,
        rows=[asdict(r) for r in rows],
    )


#: ``tracekit bench`` exits with this when a row misses its target (the table says which).
EXIT_TARGET_MISSED = 1


def bench_main(argv: Sequence[str] | None = None) -> int:
    """``tracekit bench``: print each row as it is measured, optionally write JSON.

    Returns:
        0 when every row with a target met it, :data:`EXIT_TARGET_MISSED` (1) when one did not
        (its ``met`` column says NO); the JSON is written either way.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    from tracekit.kernels.backend import get_backend

    b = get_backend(args.backend)
    print(f"device: {b.device_name()} ({b.name}); rows print as they are measured", flush=True)
    print(format_row(), flush=True)
    result = run_bench(
        args.backend, args.only, args.quick, on_row=lambda r: print(format_row(r), flush=True)
    )
    result["command"] = " ".join(["tracekit", "bench", *(shlex.quote(a) for a in argv)])
    rows = [Row(**r) for r in result["rows"]]
    missed = [r.kernel for r in rows if r.met is False]
    print(f"{result['date']}: {len(rows)} rows, {len(missed)} missed their target", flush=True)
    if args.json:
        tmp = f"{args.json}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1, allow_nan=False)
        os.replace(tmp, args.json)
    if missed:
        print(f"targets missed: {', '.join(missed)}", file=sys.stderr)
        return EXIT_TARGET_MISSED
    return 0
