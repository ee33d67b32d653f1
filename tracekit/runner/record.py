"""Traced execution: run a model step by step, wrap every node, write a trace file v1.

Per node (the :class:`Tracer`, a ``node_hook``): an NVTX push/pop range (domain ``tracekit``,
message = node name, category = kernel family, payload = node index) nested in the step range
(``prefill``, ``decode 3``) and the layer range (``blk.7``), popped in ``finally``; each of the
node's launches timed on the GPU clock (tracekit/runner/stamps.py: in-kernel start and end stamps,
stamp kernels around a cuBLAS GEMM; a node's time is the sum of its launches'; on NumPy the host
clock around the call); then, in the full
pass, outside the timed region and the node's range, its output is queued in the step's
:class:`~tracekit.kernels.stats.StatsBatch`. The statistics of every queued output are computed
together after the step's last node (a constant number of launches and one device-to-host copy
per step, not ~3 launches and a synchronizing copy per node), or earlier when the kept outputs
exceed ``STATS_BATCH_BYTES`` (a long prompt's prefill). A node whose output a later node
overwrites in place (:func:`overwritten_in_place`) is queued as a device copy.

Capture modes:

- ``timing``: one pass per step, no statistics.
- ``full``: per step, the full pass (timing + statistics), then the timing pass. A step is
  stateful only through the KV cache: it writes cache rows ``n_past .. n_past + nt - 1`` and
  reads rows below ``n_past + nt``. So the second pass re-runs the same step after rewinding the
  session's ``n_past``: it reads the same cache prefix, recomputes the same rows with the same
  values and overwrites them, and chooses the same token. The full pass goes first so that the
  timing pass starts right after another pass, not after the tracer's host work on the
  previous step (on the H200 VM a launch after that work costs 20-100 us more: BENCHMARKS.md,
  "Capture overhead"); with CUDA graphs, both passes' results are formatted after both ran.
  Each node's ``capture_cost`` = its full-pass host time (launches + queuing its output) ÷ its
  timing-pass host time; the statistics are a per-step cost (the step's ``stats_s``, inside
  ``full_wall_s``).

Decode steps are replayed (``tracekit/runner/replay.py``): the warm-up's decode step is recorded
through the whole dispatch chain, and every later decode step replays its launches (the
statistics pass too, so a node's output is the same buffer in both passes). With
``cuda_graph=True`` (cupy only) each pass of a decode step is one CUDA graph launch of the
recorded step in which every launch is timed on the GPU clock (tracekit/runner/stamps.py, the
``graph`` plan; one ``globaltimer_stamp`` kernel after the last node): no host gaps, no kernel
added between nodes, a node's ``host_s`` is the step's host time / the node count, the full
pass's graph also holds the statistics (copies of outputs overwritten in place,
then the batch's memset and two kernels), and neither pass has per-node NVTX ranges (the
step's range only; run without ``cuda_graph`` for per-node ranges under nsys or ncu). The
prefill always runs through the dispatch chain.

Ctrl-C (KeyboardInterrupt) during a run writes the steps completed so far with
``complete: false`` and raises :class:`RecordInterrupted`; before the first step completes it
writes nothing, so a trace already at the output path is never replaced by an empty one.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from tracekit._version import __version__
from tracekit.kernels.cuda import pinned_array
from tracekit.kernels.stats import StatsBatch, StatsResults
from tracekit.kernels.stats import tensor_stats as tensor_stats  # kept: tests patch this name
from tracekit.runner import stamps
from tracekit.runner.graph import fusion_note, overwritten_in_place
from tracekit.runner.timers import node_timer
from tracekit.trace import perf
from tracekit.trace.format import FORMAT, MAX_TRACE_STEPS, VERSION, sig, utc_now, write_trace
from tracekit.trace.outpath import InterruptedAfterWrite, check_output_path, held_signals
from tracekit.trace.tensors import (
    DumpError,
    DumpLimitError,
    Dumps,
    file_size,
    match_nodes,
    metadata,
    planned_entries,
    remove_old_sidecars,
    write_sidecar,
)

if TYPE_CHECKING:
    from tracekit.kernels.backend import Backend
    from tracekit.runner.execute import Model
    from tracekit.runner.graph import Node

DOMAIN = "tracekit"
TOP_K = 10
LOGIT_BINS = 32
#: The full pass collects its statistics batch early when the outputs it keeps exceed this many
#: bytes (a 4096-token prefill of a 576-wide, 1536-FF model keeps ~0.2 GB per layer).
STATS_BATCH_BYTES = 1 << 30
CUDA_GRAPH_NOTE = (
    "cuda_graph: each decode step's passes replayed the recorded decode step as one CUDA graph "
    "whose kernels write their own start and end on the GPU clock (the full pass with its "
    "statistics kernels inside); a launch that cannot (a cuBLAS GEMM) runs from the previous "
    "launch's end to the next one's start; node time_s is the sum of its launches' times, "
    "host_s is the step's host time / nodes, and those passes have no per-node NVTX ranges"
)
#: ARGB colour per kernel family for nsys' timeline (any distinct colours would do).
_COLORS = {
    "embed": 0xFF8C564B,
    "elementwise": 0xFF1F77B4,
    "dequant": 0xFF9467BD,
    "norm": 0xFF2CA02C,
    "rope": 0xFFBCBD22,
    "attention": 0xFFD62728,
    "matmul": 0xFFFF7F0E,
    "reduce": 0xFF17BECF,
}


class RecordInterrupted(KeyboardInterrupt):
    """Ctrl-C during a recording; the completed steps were saved to ``path`` (incomplete), or
    ``path`` is None when no step had completed (nothing written)."""

    def __init__(self, path: Path | None, steps: int) -> None:
        super().__init__(f"interrupted after {steps} complete step(s)")
        self.path = path
        self.steps = steps


# -- NVTX ---------------------------------------------------------------------------------------
class Ranges:
    """NVTX push/pop ranges of one domain, with event attributes built once per message.

    ``domain=None`` disables them (``--no-nvtx``). Any object with ``get_event_attributes``,
    ``push_range`` and ``pop_range`` works as the domain (tests pass a recorder).
    """

    def __init__(self, enabled: bool = True, domain: Any = None) -> None:
        if domain is None and enabled:
            import nvtx

            domain = nvtx.get_domain(DOMAIN)
        self.domain = domain if enabled else None
        self._attrs: dict[str, Any] = {}
        self.depth = 0

    def attrs(self, message: str, category: str | None = None, payload: int | None = None) -> Any:
        a = self._attrs.get(message)
        if a is None and self.domain is not None:
            a = self.domain.get_event_attributes(
                message=message,
                color=_COLORS.get(category or "", 0xFF7F7F7F),
                category=category,
                payload=payload,
            )
            self._attrs[message] = a
        return a

    def push(self, attrs: Any) -> None:
        if self.domain is not None:
            self.domain.push_range(attrs)
        self.depth += 1

    def pop(self) -> None:
        if self.depth <= 0:
            return
        self.depth -= 1
        if self.domain is not None:
            self.domain.pop_range()

    def pop_all(self) -> None:
        while self.depth:
            self.pop()


def load_phase(weights: Any, ceilings: dict[str, Any]) -> dict[str, Any] | None:
    """The trace's ``load`` phase: the w16 cache's warm-up, one node per weight with its dequant
    launch, time and perf annotation; None when nothing was dequantized into the cache."""
    nodes = []
    for n in weights.load_nodes:
        t = sig(n["time_s"])
        p = perf.annotate(n["launches"], t, ceilings)
        for k in ("intensity", "achieved_Bps", "achieved_flops", "fraction_of_ceiling"):
            p[k] = sig(p[k])
        nodes.append({**n, "time_s": t, "perf": p})
    if not nodes:
        return None
    return {"seconds": sig(weights.load_seconds), "nodes": nodes}


# -- the node hook ------------------------------------------------------------------------------
def heatmap_axes(node: Node) -> tuple[str, str]:
    """Names of the heatmap's axes, from the node's symbolic output shape."""
    shape = node.shape
    first = "rows" if shape and shape[0] == "nr" else "tokens"
    if node.op == "add_rms_norm":  # [2, nt, e]: the sum's rows, then its norm's
        return f"planes×{first}", "features"
    if len(shape) == 3:
        return f"{first}×heads", "head_dim"
    if node.name == "output":
        return first, "vocab"
    return first, "features"


class Tracer:
    """The ``node_hook`` of traced execution: NVTX ranges, node timing, launches, statistics.

    Use: ``begin_step(name, full)``, ``session.run_step(tokens, node_hook=tracer)``, then (full
    pass) ``collect_stats()``, ``end_step()`` (in ``finally``), then ``results()`` for that pass.

    Args:
        backend, nodes, ranges: the backend, the graph's nodes, the NVTX ranges.
        max_batch_bytes: collect the statistics batch early once the outputs it keeps exceed
            this many bytes (one more readback per early collection); default
            ``STATS_BATCH_BYTES``.
    """

    def __init__(
        self,
        backend: Backend,
        nodes: list[Node],
        ranges: Ranges,
        max_batch_bytes: int | None = None,
    ) -> None:
        self.be = backend
        self.nodes = nodes
        self.ranges = ranges
        self.node_attrs = [ranges.attrs(n.name, n.family, n.id) for n in nodes]
        self.axes = [heatmap_axes(n) for n in nodes]
        self.copy_out = overwritten_in_place(nodes)
        #: per node (heatmap axes, overwritten later): what a full CUDA graph's statistics need
        self.stats_spec = list(zip(self.axes, self.copy_out, strict=True))
        self.timer = node_timer(backend, len(nodes))
        self.max_batch_bytes = STATS_BATCH_BYTES if max_batch_bytes is None else max_batch_bytes
        self.batch = StatsBatch()
        self.full = False
        #: --dump: the nodes whose whole outputs the dump pass keeps (read back after the pass)
        self.dump_ids: frozenset[int] = frozenset()
        self.dump_pass = False
        self._dumped: dict[int, Any] = {}
        self._layer: int | None = None
        self._ran = 0
        self._host = [0.0] * len(nodes)
        self._launches: list[list[Any]] = [[] for _ in nodes]
        self._shape: list[tuple[int, ...]] = [() for _ in nodes]
        self._dtype: list[Any] = [None] * len(nodes)
        self._collected: list[StatsResults] = []
        #: The pass's statistics: host seconds collecting them (kernels + readback), the
        #: collections made, their kernel launches, and seconds formatting them (results()).
        self.stats_s = 0.0
        self.stats_collects = 0
        self.stats_launches = 0
        self.stats_format_s = 0.0

    def begin_step(self, name: str, full: bool, dump: bool = False) -> None:
        self.full = full
        self.dump_pass = dump and bool(self.dump_ids)
        self._dumped = {}
        self._ran = 0
        self._layer = None
        self.batch.clear()  # an interrupted pass may have left references
        self._collected = []
        self.stats_s = self.stats_format_s = 0.0
        self.stats_collects = self.stats_launches = 0
        self.be.take_records()  # nothing queued before the step belongs to a node
        self.timer.begin()
        self.ranges.push(self.ranges.attrs(name, "step"))

    def end_step(self) -> None:
        self.timer.end()
        self.ranges.pop_all()
        self._layer = None
        self.batch.clear()  # empty after collect_stats(); after an error, drop its references

    def __call__(self, node: Node, thunk: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        i = node.id
        if node.layer != self._layer:
            if self._layer is not None:
                self.ranges.pop()
            if node.layer is not None:
                self.ranges.push(self.ranges.attrs(f"blk.{node.layer}", "layer"))
            self._layer = node.layer
        self.timer.mark(i)  # the queued marker (a stamp kernel) stays outside the node's range
        self.ranges.push(self.node_attrs[i])
        try:
            self.timer.start(i)
            out = thunk()
            self.timer.stop(i)
        finally:
            self.ranges.pop()
        self._launches[i] = self.be.take_records()
        if self.full:  # after its launches: no statistics work inside the node's time
            self.batch.add(i, out, self.axes[i], self.copy_out[i])
        if self.dump_pass and i in self.dump_ids:  # a later node may write into it: a copy
            self._dumped[i] = out.copy() if self.copy_out[i] else out
        self._shape[i] = out.shape  # converted in results(), off the per-node path
        self._dtype[i] = out.dtype
        self._host[i] = time.perf_counter() - t0
        self._ran = i + 1
        if self.full and self.batch.nbytes >= self.max_batch_bytes:
            self.collect_stats()  # between nodes: outside every node's events and host time
        return out

    def take_dumps(self) -> dict[str, np.ndarray]:
        """The dump pass's kept outputs on the host, by node name (after the pass's wall)."""
        out = {self.nodes[i].name: np.array(self.be.to_host(a)) for i, a in self._dumped.items()}
        self._dumped = {}
        return out

    def collect_stats(self) -> None:
        """Compute the statistics of the outputs queued so far (kernels + one readback)."""
        if not len(self.batch):
            return
        t0 = time.perf_counter()
        self._collected.append(self.batch.collect())
        self.stats_s += time.perf_counter() - t0
        self.stats_collects += 1
        self.stats_launches += len(self.batch.launches)

    def results(self) -> list[dict[str, Any]]:
        """Per node of the pass just run: time_s, host_s, launches, stats, shape, dtype.

        The statistics collected in the pass are formatted here, floats at float32 precision
        (host work after the pass; its seconds go to ``stats_format_s``)."""
        times = self.timer.times(self._ran)
        ivals, self.span_ns = self.timer.intervals(self._ran)
        timed = self.timer.launch_times(self._ran)  # per node, its launches' own times
        stats: dict[int, dict[str, Any]] = {}
        if self.full:
            t0 = time.perf_counter()
            for r in self._collected:
                stats.update((k, compact_stats(v)) for k, v in r.format().items())
            self._collected = []
            self.stats_format_s = time.perf_counter() - t0
        return [
            {
                "time_s": times[i],
                "host_s": self._host[i],
                "launches": launch_json(self._launches[i], timed[i]),
                "stats": stats[i] if self.full else None,
                "shape": [int(d) for d in self._shape[i]],
                "dtype": np.dtype(self._dtype[i]).name,
                "interval": ivals[i],
            }
            for i in range(self._ran)
        ]


def launch_json(records: Sequence[Any], timed: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A node's launch records for the trace, each with its own timing fields (``time_s``,
    ``start_ns``, ``end_ns``, ``queued_ns``) when the timer timed each launch: one timing per
    record, else none (a node whose records and launches do not pair up keeps its node time
    only, rather than a time put on the wrong launch)."""
    out = [r.to_json() for r in records]
    if len(timed) == len(out):
        for d, t in zip(out, timed, strict=True):
            d.update(t)
    return out


def _f32(v: Any) -> Any:
    # Shortest repr of the float32 nearest v: stats are f32 data, and 9 digits instead of 17
    # keep a 24-layer x 32-step trace under 20 MB (docs/trace-format.md).
    if isinstance(v, float) and math.isfinite(v):
        r = float(str(np.float32(v)))
        return r if math.isfinite(r) else v
    return v


def compact_stats(s: dict[str, Any]) -> dict[str, Any]:
    """``tensor_stats`` output with its floats at float32 precision (shortest repr)."""
    out = {k: _f32(v) for k, v in s.items()}  # hist kept exact: stored as lo/hi (trace.py)
    hm = s.get("heatmap")
    if hm:
        out["heatmap"] = {**hm, "lo": _f32(hm["lo"]), "hi": _f32(hm["hi"])}
    return out


# -- logits -------------------------------------------------------------------------------------
def logit_summary(
    logits: np.ndarray, chosen: int, text: Callable[[int], str], k: int = TOP_K
) -> dict[str, Any]:
    """Top-k tokens with probabilities, entropy (nats), a histogram and the chosen token."""
    z = np.asarray(logits, dtype=np.float64).reshape(-1)
    finite = np.isfinite(z)
    if not finite.any():
        p = np.zeros_like(z)
    else:
        zz = np.where(finite, z, -np.inf)
        zz = zz - zz.max()
        p = np.exp(zz)
        p /= p.sum()
    nz = p[p > 0]
    entropy = float(-(nz * np.log(nz)).sum()) if nz.size else 0.0
    k = min(k, z.size)
    top = np.argsort(-np.where(finite, z, -np.inf), kind="stable")[:k]
    if finite.any():
        lo, hi = float(z[finite].min()), float(z[finite].max())
        if hi <= lo:
            lo, hi = lo - 0.5, hi + 0.5
        counts, edges = np.histogram(z[finite], bins=LOGIT_BINS, range=(lo, hi))
    else:
        counts, edges = np.zeros(0, np.int64), np.zeros(0)
    return {
        "top_k": [{"id": int(t), "text": text(int(t)), "prob": min(1.0, float(p[t]))} for t in top],
        "entropy": max(0.0, entropy),
        "hist": {"edges": edges.tolist(), "counts": [int(c) for c in counts]},
        "chosen": {
            "id": int(chosen),
            "text": text(int(chosen)),
            "prob": min(1.0, float(p[chosen])),
        },
    }


# -- trace assembly -----------------------------------------------------------------------------
def model_info(model: Model) -> dict[str, Any]:
    c = model.config
    types: dict[str, int] = {}
    for t in model.tensors.values():
        types[t.qtype.name] = types.get(t.qtype.name, 0) + 1
    path = Path(model.path)
    return {
        "name": c.name or path.stem,
        "path": str(path),
        "architecture": c.arch,
        "n_layer": c.n_layer,
        "n_embd": c.n_embd,
        "n_head": c.n_head,
        "n_head_kv": c.n_head_kv,
        "head_dim": c.head_dim,
        "n_ff": c.n_ff,
        "n_vocab": c.n_vocab,
        "n_ctx": c.n_ctx,
        "file_bytes": path.stat().st_size if path.exists() else 0,
        "tensor_types": types,
        "arch_settings": c.summary(),
    }


def _ceilings_json(c: dict[str, Any]) -> dict[str, Any]:
    out = dict(c)
    out.setdefault("ridge_flop_per_byte", c["peak_flops"] / perf.bandwidth_ceiling(c)[0])
    out.setdefault("measured_at", utc_now())
    out.setdefault("method", "given by the caller")
    return out


def _node_record(
    i: int,
    timing: dict[str, Any],
    full: dict[str, Any] | None,
    ceilings: dict[str, Any],
    mode: str = "stream",
) -> dict[str, Any]:
    src = full or timing
    t = sig(timing["time_s"])
    # derived again on load (perf.derive_trace); kept here for on_step and in-memory readers
    p = perf.annotate(timing["launches"], t, ceilings, mode)
    host, full_host = timing["host_s"], full["host_s"] if full else None
    start, end, queued = timing.get("interval") or (None, None, None)
    interval: dict[str, Any] = {}
    if start is not None:
        interval = {"start_ns": start, "end_ns": end}
        if queued is not None:
            interval["queued_ns"] = queued
    return {
        **interval,
        "id": i,
        "shape": src["shape"],
        "dtype": src["dtype"],
        "time_s": t,
        "timing_time_s": t,
        "full_time_s": sig(full["time_s"]) if full else None,
        "host_s": sig(host),
        "full_host_s": sig(full_host),
        "capture_cost": sig(full_host / host) if full_host is not None and host > 0 else None,
        "launches": timing["launches"],
        "perf": p,
        "stats": full["stats"] if full else None,
    }


def _resolve_model(model: Any, fuse: bool | None = None) -> Model:
    from tracekit.runner.execute import Model, load_model

    if isinstance(model, Model):
        if fuse is not None and fuse != model.fuse:
            raise ValueError(
                f"fuse={fuse} for a model loaded with fuse={model.fuse}: load it with "
                f"load_model(path, fuse={fuse}) or pass its path"
            )
        return model
    if model is None:
        from tracekit.model.demo import demo_model_path

        model = demo_model_path()
    return load_model(model, fuse=True if fuse is None else fuse)


def _sampling_json(sampling: Any) -> tuple[dict[str, Any], dict[str, Any] | str]:
    """(the trace's ``run.sampling``, the spec ``execute.Sampling.of`` takes)."""
    if sampling is None or sampling == "greedy":
        return {"mode": "greedy"}, "greedy"
    if not isinstance(sampling, dict):
        raise ValueError(f"sampling {sampling!r} must be 'greedy' or a dict")
    s = {k: v for k, v in sampling.items() if k != "mode"}
    if sampling.get("mode") == "greedy" or float(s.get("temperature", 0.0)) == 0.0:
        return {"mode": "greedy"}, "greedy"
    spec = {"temperature": float(s["temperature"]), "top_k": int(s.get("top_k", 0))}
    spec["seed"] = s.get("seed")
    return {"mode": "sample", **spec}, spec


def extra_defines_note(backend_name: str) -> str | None:
    """The ``run.notes`` line of a CuPy run whose kernels compiled with $TRACEKIT_CUDA_DEFINES
    (cuda.EXTRA_DEFINES: a measurement knob changes what the kernels do), else None."""
    from tracekit.kernels import cuda

    if backend_name != "cupy" or not cuda.EXTRA_DEFINES:
        return None
    return f"kernels compiled with {cuda.EXTRA_DEFINES_ENV}: {' '.join(cuda.EXTRA_DEFINES)}"


def record_trace(
    model_path: Any = None,
    prompt: str | None = None,
    tokens: list[int] | None = None,
    steps: int = 8,
    backend: Any = "auto",
    capture: str = "full",
    output: str | os.PathLike[str] | None = None,
    nvtx: bool = True,
    cuda_graph: bool = False,
    progress: bool = True,
    sampling: Any = None,
    ceilings: dict[str, Any] | None = None,
    on_step: Callable[[dict[str, Any]], Any] | None = None,
    nvtx_domain: Any = None,
    top_k: int = TOP_K,
    warmup: bool = True,
    remeasure: bool = False,
    dump: str | None = None,
    save_logits: bool = False,
    dump_limit: int | None = None,
    on_dump_estimate: Callable[[DumpPlan], Any] | None = None,
    matmul: str | None = None,
    w16_cache: str = "auto",
    fuse: bool | None = None,
    pdl: bool | None = None,
    alternate_modes: bool = False,
) -> Path:
    """Run prefill + ``steps`` decode steps with every node traced; write the trace file.

    Args:
        model_path: a .gguf path, a loaded Model, or None for the bundled demo model.
        prompt, tokens: the prompt as text (tokenized by the model) or ids; neither: "Hello".
        steps: decode steps after the prefill (stops early at the model's EOS token).
        backend: "auto", "cupy", "numpy" or a Backend.
        capture: "full" (timing pass + statistics pass per step) or "timing".
        output: the trace path (default ``traces/<model>-<backend>.json``).
        nvtx: emit NVTX ranges.
        cuda_graph: replay each decode step's timing pass as a CUDA graph (cupy backend only;
            see the module docstring).
        progress: a tqdm bar on stderr.
        sampling: "greedy"/None, or {"temperature", "top_k", "seed"}.
        ceilings: device ceilings to use instead of ``measure_ceilings(backend)``.
        on_step: called with each completed step record (after it is in the trace).
        nvtx_domain: an NVTX domain object to use instead of ``nvtx.get_domain("tracekit")``.
        top_k: tokens listed per step.
        matmul, w16_cache: the matmul path (``quant``/``f16``/``f32``; None: the backend's
            default) and the w16 cache mode (``auto``/``on``/``off``), see kernels/matmul.py.
        remeasure: measure the device ceilings again instead of reading the cached ones.
        warmup: first run the prefill and one decode step untraced, then reset the cache, so
            no node's time includes compiling its kernels (NVRTC) or creating cuBLAS handles.
        dump: keep the whole output of every node whose name matches this regex
            (``re.fullmatch``), every step, in the trace's tensor sidecar
            (tracekit/trace/tensors.py); taken in the full pass (the timing pass under
            ``capture="timing"``) and read back after the pass's timed wall.
        save_logits: keep each step's logits row and the token ids in the sidecar too.
        dump_limit: refuse (:class:`~tracekit.trace.tensors.DumpLimitError`, before any
            kernel runs) when the sidecar's estimated size exceeds this many bytes.
        on_dump_estimate: called with the :class:`DumpPlan` before the run (the CLI prints it).
        pdl: with ``cuda_graph``, capture the decode graph's kernels as programmatic dependent
            launches (``Session(pdl=True)``; the trace's ``run.pdl``); the full pass's graph
            too, unless it copies an output (a memcpy node between kernels). None (the
            default): on where the device can (sm_90 and ``cuda_graph``), else off; True
            without ``cuda_graph`` is refused.
        alternate_modes: with ``cuda_graph``, the replayed decode steps alternate between a
            CUDA-graph pass and a stream pass (each launch into the stream, timed by its own
            stamps) of the same recorded step: the same kernels on the same buffers, so a node's
            two times differ only by who launched it (``run.alternate_modes``; each step's
            ``launch_mode`` says which it was). Separate recordings put the buffers elsewhere,
            and a one-block kernel's time follows them (scripts/placement_effect.py).
        fuse: fuse q/k/v and gate/up into one matmul each where their weights share a type
            (``runner.graph.fusion_plan``; the trace's ``run.fuse`` and a note say which); False
            keeps one matmul node per projection. None: True for a path, a Model's own setting.

    Returns:
        The path written.

    Raises:
        ValueError: bad arguments, token ids, or prompt + steps beyond the context (before any
            kernel runs); ModelError, BackendUnavailable, TraceError as raised below.
        RecordInterrupted: Ctrl-C; the completed steps were written, marked incomplete.
    """
    from tracekit.runner.execute import GenerationError, Sampling, Session, check_token_ids

    if capture not in ("full", "timing"):
        raise ValueError(f"capture {capture!r} must be 'full' or 'timing'")
    if prompt is not None and tokens is not None:
        raise ValueError("give a prompt or tokens, not both")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps {steps!r} must be an integer >= 0")
    run_sampling, spec = _sampling_json(sampling)
    sampler = Sampling.of(spec)
    if output is not None:  # a bad -o fails now, not after the run
        given = getattr(model_path, "path", model_path)
        check_output_path(output, inputs=[given] if isinstance(given, (str, os.PathLike)) else [])
    _status(progress, f"loading {_model_label(model_path)} ...")
    model = _resolve_model(model_path, fuse)
    cfg = model.config
    if tokens is None:
        prompt = "Hello" if prompt is None else prompt
        ids = model.tokenize(prompt)
    else:
        ids = list(tokens)
    if not ids:
        raise GenerationError("the prompt is empty: give at least one token")
    ids = check_token_ids(ids, cfg.n_vocab)
    if len(ids) + steps > cfg.n_ctx:
        raise GenerationError(
            f"the prompt of {len(ids)} tokens + {steps} decode steps need {len(ids) + steps} "
            f"positions, more than the model's context of {cfg.n_ctx}"
        )
    if alternate_modes and not cuda_graph:
        raise GenerationError(
            "alternating launch modes needs --cuda-graph: the stream passes replay the step the "
            "graph was captured from"
        )
    if pdl and not cuda_graph:
        raise GenerationError(
            "--pdl needs --cuda-graph: programmatic dependent launches are made in the decode "
            "step's CUDA graph"
        )
    if steps + 1 > MAX_TRACE_STEPS:  # the trace could not be loaded again: say so now
        raise GenerationError(
            f"steps {steps} + the prefill make more than the {MAX_TRACE_STEPS:,} steps a trace "
            "may hold (MAX_TRACE_STEPS)"
        )
    plan = plan_dump(model, dump, save_logits, len(ids), steps, capture, cuda_graph)
    if plan is not None and dump_limit is not None and plan.bytes > dump_limit:
        from tracekit.trace.perf import fmt_bytes

        raise DumpLimitError(
            f"the tensor sidecar would hold {plan.count} tensors, {fmt_bytes(plan.bytes)} "
            f"({plan.bytes:,} bytes), more than --dump-limit {fmt_bytes(dump_limit)} "
            f"({dump_limit:,} bytes): narrow --dump, record fewer steps or raise the limit"
        )
    if plan is not None and on_dump_estimate is not None:
        on_dump_estimate(plan)
    _status(progress, f"{cfg.name or cfg.arch}: preparing the {backend} backend ...")
    be = model.backend(backend, matmul, w16_cache)
    from tracekit.kernels.ceilings import measure_ceilings

    if ceilings is None:
        _status(progress, f"{cfg.name or cfg.arch} [{be.name}]: device ceilings (cached) ...")
    measured = measure_ceilings(be, force=remeasure) if ceilings is None else ceilings
    ceil = _ceilings_json(measured)
    session = Session(
        model, be, n_ctx=len(ids) + steps, replay="graph" if cuda_graph else "auto", pdl=pdl
    )
    if warmup:
        _status(
            progress, f"{cfg.name or cfg.arch} [{be.name}]: warm-up (untraced prefill + step) ..."
        )
        _warm_up(session, ids, steps)
    notes: list[str] = list(cfg.notes)  # how the file is run where its metadata says otherwise
    fused = fusion_note(model.graph.fused, cfg.n_layer)
    if fused is not None:
        notes.append(fused)
    if cuda_graph:
        notes.append(CUDA_GRAPH_NOTE)
    extra = extra_defines_note(be.name)
    if extra is not None:
        notes.append(extra)
    texts: dict[int, str] = {}

    def text(t: int) -> str:
        if t not in texts:
            try:
                texts[t] = model.detokenize([t])
            except Exception as e:  # a model without a usable tokenizer: ids still recorded
                note = f"token text unavailable ({type(e).__name__}: {e})"
                if note not in notes:
                    notes.append(note)
                texts[t] = f"<{t}>"
        return texts[t]

    out_path = (
        Path(output)
        if output is not None
        else Path("traces") / f"{Path(model.path).stem}-{be.name}.json"
    )
    nodes = list(model.graph)
    trace: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "complete": False,
        "created": utc_now(),
        "tool": {"name": "tracekit", "version": __version__},
        "model": model_info(model),
        "run": {
            "backend": be.name,
            "matmul": be.matmul_mode,
            "w16_cache": be.w16_cache,
            "fuse": bool(model.fuse),
            "device": be.device_name(),
            "capture": capture,
            "cuda_graph": bool(cuda_graph),
            "cuda_graph_requested": bool(cuda_graph),
            "alternate_modes": bool(alternate_modes),
            "pdl": bool(session.pdl),
            "replay": session.replay_mode,
            "warmup": bool(warmup),
            "nvtx": bool(nvtx),
            "prompt": prompt if tokens is None else None,
            "prompt_tokens": ids,
            "steps_requested": steps,
            "sampling": run_sampling,
            "generated_tokens": [],
            "generated_text": "",
            "stop_reason": None,
            "notes": notes,
        },
        "ceilings": ceil,
        "classification": perf.classification(ceil),
        "nodes": [n.to_json() for n in nodes],
        "steps": [],
    }
    load = load_phase(session.weights, ceil)
    if load is not None:  # the w16 cache's warm-up (issue 13): a node per weight
        trace["load"] = load
    tracer = Tracer(be, nodes, Ranges(nvtx, nvtx_domain))
    gate_note = getattr(tracer.timer, "gate_note", None)  # stamps.StampTimer: no gate here
    if gate_note is not None:
        notes.append(gate_note)
    gate = getattr(tracer.timer, "gate", None)  # stream mode's (stamps.StampTimer)
    cold0 = gate.cold if gate is not None else 0

    def note_cold_gate() -> None:  # before each write: the launches the gate could not hold
        cold = gate.cold - cold0 if gate is not None else 0
        if cold:
            notes.append(stamps.cold_gate_note(cold))

    dumps = None
    if plan is not None:
        dumps = Dumps(dump, [n.id for n in plan.nodes], save_logits)
        tracer.dump_ids = frozenset(dumps.node_ids)
    for k in range(steps + 1):  # NVTX attributes made now, not inside a step's timed wall
        tracer.ranges.attrs("prefill" if k == 0 else f"decode {k}", "step")
    if session.replay_mode == "graph" and session.replay is not None:
        # capture the graphs now (~40 ms for 460 nodes), not inside the first decode step
        session.replay.capture_graph("timed")
        if capture == "full":
            session.replay.capture_graph("full", tracer.stats_spec)
    eos = model.eos_id
    generated: list[int] = []
    from tqdm import tqdm

    bar = tqdm(
        total=steps + 1, unit="step", file=sys.stderr, disable=not progress, leave=True,
        desc=f"{trace['model']['name']} [{be.name}, {capture}]",
    )  # fmt: skip
    # A step's record (node records, statistics, logit summary) is built by flush(). With CUDA
    # graphs that waits until the run ends, or FLUSH_EVERY_S passed, so the passes of
    # consecutive steps run back to back as an untraced loop's steps do: host work between
    # them makes the next launch slower (BENCHMARKS.md, "Capture overhead").
    defer = _defers_records(session)
    pending: list[_Pending] = []
    host = _HostBuffers(session, capture == "full", steps) if defer else None

    def flush(more_steps: bool = True, notify: bool = True) -> None:
        if host is not None and more_steps:
            host.refill()
        while pending:
            item = pending[0]
            if not trace["steps"] or trace["steps"][-1]["index"] < item.index:
                step = _step_record(item, session, len(nodes), ceil, text, top_k)
                trace["steps"].append(step)
                if on_step is not None and notify:
                    on_step(step)
            del pending[0]  # an interrupt before this line: the index check skips it next time

    try:
        feed = ids
        flushed = time.perf_counter()
        for k in range(steps + 1):
            name = "prefill" if k == 0 else f"decode {k}"
            bar.set_postfix_str(name)
            n_past = session.n_past
            # alternate_modes: decode steps 3, 5, ... replay the recorded step launch by
            # launch (Session.run_step with the tracer's hook) instead of as the graph
            stream = alternate_modes and k >= 3 and k % 2 == 1
            timing, full = _step_passes(
                session, tracer, feed, name, capture == "full", host, stream=stream
            )
            logits = (full or timing)["logits"]
            token = sampler(logits)
            generated.append(token)
            pending.append(_Pending(k, name, list(feed), n_past, timing, full, logits, token))
            if dumps is not None:
                dumps.add_outputs(k, (full or timing)["dumps"])
                dumps.add_logits(k, logits, feed, token)
            trace["run"]["generated_tokens"] = list(generated)
            bar.update(1)
            if not defer or time.perf_counter() - flushed > FLUSH_EVERY_S or host.empty:
                flush()
                flushed = time.perf_counter()
            if eos is not None and token == eos:
                trace["run"]["stop_reason"] = "eos"
                break
            feed = [token]
        else:
            trace["run"]["stop_reason"] = "steps"
        flush(more_steps=False)
    except KeyboardInterrupt:
        bar.close()
        trace["run"]["stop_reason"] = "interrupted"
        # the steps whose passes completed; on_step is not called again: the CLI's Ctrl-C watch
        # would raise once more from it (its flag stays set), and the trace would be lost
        flush(more_steps=False, notify=False)
        # only the steps in the trace count (the interrupt may fall between sampling and append)
        generated = [st["logits"]["chosen"]["id"] for st in trace["steps"]]
        if not trace["steps"]:  # nothing to save: keep whatever trace is at the path already
            raise RecordInterrupted(None, 0) from None
        note_cold_gate()
        try:
            path = _write_final(trace, generated, text, model, out_path, dumps, progress)
        except InterruptedAfterWrite:  # a second signal during this save: it is saved anyway
            path = out_path
        raise RecordInterrupted(path, len(trace["steps"])) from None
    except Exception:
        bar.leave = False  # an error is one line: the bar goes (it stays after a run)
        raise
    finally:
        bar.close()
    trace["complete"] = True
    note_cold_gate()
    return _write_final(trace, generated, text, model, out_path, dumps, progress)


class DumpPlan(NamedTuple):
    """What ``--dump``/``--save-logits`` will write: the matched nodes, the sidecar's tensor
    count and its size in bytes (exact for a run of every requested step)."""

    nodes: list[Any]
    count: int
    bytes: int


def plan_dump(
    model: Model,
    regex: str | None,
    save_logits: bool,
    n_prompt: int,
    steps: int,
    capture: str = "full",
    cuda_graph: bool = False,
) -> DumpPlan | None:
    """The sidecar a recording will write, or None without ``--dump``/``--save-logits``.

    Raises:
        DumpError: a bad regex, one that matches no node, or (CUDA graphs with timing capture)
            a matched node whose output a later node overwrites in place, which a timed graph
            does not keep.
    """
    if regex is None and not save_logits:
        return None
    nodes = list(model.graph)
    matched = match_nodes(nodes, regex) if regex is not None else []
    if regex is not None and not matched:
        raise DumpError(f"--dump {regex!r} matches no node (names like {nodes[1].name!r})")
    if cuda_graph and capture == "timing":
        over = overwritten_in_place(nodes)
        bad = [n.name for n in matched if over[n.id]]
        if bad:
            raise DumpError(
                f"--dump with --cuda-graph --capture timing: a later node overwrites the output "
                f"of {bad[0]} in place and a timing graph keeps no copy; use --capture full"
            )
    entries = planned_entries(matched, [n_prompt] + [1] * steps, model.config.n_vocab,
                              save_logits)  # fmt: skip
    return DumpPlan(matched, len(entries), file_size(entries, metadata(regex, save_logits)))


def _write(trace: dict[str, Any], out_path: Path, dumps: Dumps | None) -> Path:
    """The trace, and first its tensor sidecar (tracekit/trace/tensors.py: atomic as a pair)."""
    if dumps is None:
        path = write_trace(trace, out_path)
        remove_old_sidecars(out_path, keep=None)  # an earlier recording's, now unreferenced
        return path
    steps = [st["index"] for st in trace["steps"]]
    meta = metadata(dumps.regex, dumps.save_logits)
    trace["tensors"] = write_sidecar(out_path, dumps.tensors(steps), meta)
    path = write_trace(trace, out_path)
    remove_old_sidecars(out_path, keep=trace["tensors"]["file"])
    return path


def _model_label(model_path: Any) -> str:
    if model_path is None:
        return "the demo model"
    return Path(getattr(model_path, "path", model_path)).name


def _status(progress: bool, text: str) -> None:
    """What record_trace is doing before its bar starts (loading a 270M model is ~10 s), on
    one terminal line that the next status or the bar overwrites. Only on a terminal: there
    ``\r`` + erase-line makes it vanish under an error line too (the CLI's errors start with
    the same erase), so an error stays one line."""
    if progress and sys.stderr.isatty():
        sys.stderr.write(f"\r{text}\x1b[K")
        sys.stderr.flush()


def _write_final(
    trace: dict[str, Any],
    generated: list[int],
    text: Callable[[int], str],
    model: Model,
    out_path: Path,
    dumps: Dumps | None,
    progress: bool,
) -> Path:
    """Finish and write the trace with SIGINT/SIGTERM held: a Ctrl-C here (serialising and
    checking a 31 MB trace takes ~20 s on 2 cores) used to discard the whole recording. A held
    signal raises :class:`~tracekit.trace.outpath.InterruptedAfterWrite` once it is written."""
    with held_signals() as held:
        t0 = time.perf_counter()
        if progress:
            print(
                f"writing {len(trace['steps'])} step(s) to {out_path} (Ctrl-C waits for it)...",
                file=sys.stderr,
                flush=True,
            )
        _finish(trace, generated, text, model)
        held["path"] = _write(trace, out_path, dumps)
        if progress:
            size = held["path"].stat().st_size if held["path"].is_file() else 0
            print(
                f"wrote {out_path}: {size / 1e6:.1f} MB in {time.perf_counter() - t0:.1f} s",
                file=sys.stderr,
                flush=True,
            )
    return held["path"]


#: With CUDA graphs, steps' records are built at the end of the run or after this many seconds.
FLUSH_EVERY_S = 1.0


class _HostBuffers:
    """Host arrays for CUDA-graph passes' copies while their steps' records wait (record_trace's
    flush): written and so paged in ahead, outside any pass. A copy into fresh pages faults
    on each of them inside the timed pass: +0.3-0.4 ms per 0.5B-shape step on the H200 host
    once freed memory ran out. Never reused (a record may keep views of its buffer): a flush
    makes new ones. ``empty`` (a step's passes would not fit): time to flush.

    Pinned: a pageable device-to-host copy ran at ~5 GB/s on the H200 host (+140 us a 0.5B
    full pass, scripts/full_pass_cost.py, session 12), and an untraced step's logits come back
    pinned too (CupyBackend.to_host), so timing / untraced compares the tracing, not two ways
    of copying the logits.
    """

    CAP_BYTES = 128 * 2**20

    def __init__(self, session: Any, with_full: bool, steps: int) -> None:
        replay = session.replay
        self.kinds = ["timed", "full"] if with_full else ["timed"]
        self.words = {k: replay.staging_words(k) if replay else 0 for k in self.kinds}
        per_step = 8 * sum(self.words.values())
        self.count = max(1, min(steps, self.CAP_BYTES // max(per_step, 1)))
        self.free: dict[str, list[np.ndarray]] = {k: [] for k in self.kinds}
        self.active = replay is not None  # else no graph passes (recorded step missing)
        self.refill()

    def refill(self) -> None:
        for k in self.kinds if self.active else ():
            while len(self.free[k]) < self.count:
                a = pinned_array(self.words[k], np.uint64)
                a.fill(0)  # page it in now
                self.free[k].append(a)

    def take(self, kind: str) -> np.ndarray | None:
        return self.free[kind].pop() if self.free[kind] else None

    @property
    def empty(self) -> bool:
        return self.active and any(not self.free[k] for k in self.kinds)


def _defers_records(session: Any) -> bool:
    """Whether record_trace builds step records late (CUDA-graph passes; tests patch this)."""
    return session.replay_mode == "graph"


class _Pending(NamedTuple):
    """A step whose passes ran, its record not built yet (record_trace's flush)."""

    index: int
    name: str
    feed: list[int]
    n_past: int
    timing: dict[str, Any]
    full: dict[str, Any] | None
    logits: np.ndarray
    token: int


def _step_record(
    item: _Pending,
    session: Any,
    n_nodes: int,
    ceil: dict[str, Any],
    text: Callable[[int], str],
    top_k: int,
) -> dict[str, Any]:
    """The trace's record of one step (docs/trace-format.md, ``steps[]``)."""
    timing = _formatted(session, item.timing)
    full = _formatted(session, item.full) if item.full is not None else None
    mode = timing.get("launch_mode", "stream")
    recs = [
        _node_record(i, timing["nodes"][i], full["nodes"][i] if full else None, ceil, mode)
        for i in range(n_nodes)
    ]
    extra: dict[str, Any] = {"launch_mode": mode}
    if timing.get("span_ns") is not None:
        extra["span_ns"] = int(timing["span_ns"])
        extra["clock"] = (
            "host perf_counter" if mode == "host" else "GPU globaltimer stamps (per launch)"
        )
    return {
        **extra,
        "index": item.index,
        "kind": "prefill" if item.index == 0 else "decode",
        "name": item.name,
        "n_tokens": len(item.feed),
        "n_past": item.n_past,
        "input_tokens": item.feed,
        "wall_s": timing["wall_s"],
        "timing_wall_s": timing["wall_s"],
        "full_wall_s": full["wall_s"] if full else None,
        "stats_s": sig(full["stats_s"]) if full else None,
        "stats_collects": full["stats_collects"] if full else None,
        "stats_launches": full["stats_launches"] if full else None,
        "stats_format_s": sig(full["stats_format_s"]) if full else None,
        "gpu_s": float(sum(r["time_s"] for r in recs)),
        "nodes": recs,
        "logits": logit_summary(item.logits, item.token, text, top_k),
    }


def _finish(
    trace: dict[str, Any], generated: list[int], text: Callable[[int], str], model: Model
) -> None:
    trace["run"]["generated_tokens"] = list(generated)
    try:  # decoded as one sequence: a character's bytes may span several byte-level tokens
        trace["run"]["generated_text"] = model.detokenize(generated)
    except Exception:  # no usable tokenizer (already noted in run.notes by text())
        trace["run"]["generated_text"] = "".join(text(t) for t in generated)
    trace["created"] = utc_now()


def _warm_up(session: Any, ids: list[int], steps: int) -> None:
    """One untraced prefill (and decode step), then an empty cache: the recorded steps find
    every kernel compiled and loaded. Sound because reset() only forgets the cached tokens."""
    session.run_step(ids)
    if steps:
        session.run_step([ids[-1]])
    session.reset()
    be = session.backend
    batch = StatsBatch()  # the statistics kernels too
    batch.add(0, be.asarray(np.zeros((2, 2), np.float32)))
    batch.finish()
    be.take_records()


def _step_passes(
    session: Any,
    tracer: Tracer,
    feed: list[int],
    name: str,
    with_full: bool,
    host: _HostBuffers | None = None,
    stream: bool = False,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """One step's passes: (timing, full or None). The full pass runs first, then the step is
    rewound and the timing pass re-runs it (module docstring). A CUDA-graph pass comes back
    unformatted (its host copies, :func:`_graph_run`): the caller formats it with
    :func:`_formatted` when it builds the step's record, after the run (see record_trace).
    ``stream``: no graph pass even where the session could replay one (alternate_modes)."""
    if not with_full:
        return _pass(session, tracer, feed, name, False, host, dump=True, stream=stream), None
    n_past = session.n_past
    full = _pass(session, tracer, feed, name, True, host, dump=True, stream=stream)
    session.n_past = n_past  # rewind: the timing pass re-runs this step
    return _pass(session, tracer, feed, name, False, host, stream=stream), full


def _formatted(session: Any, p: dict[str, Any]) -> dict[str, Any]:
    """A pass as :func:`_pass` documents it (a graph pass's host copies formatted now)."""
    return _graph_format(session, p) if "stamps" in p else p


def _pass(
    session: Any,
    tracer: Tracer,
    feed: list[int],
    name: str,
    full: bool,
    host: _HostBuffers | None = None,
    dump: bool = False,
    stream: bool = False,
) -> dict[str, Any]:
    """One pass of one step: {"nodes", "logits", "wall_s", "stats_s", "stats_collects",
    "stats_launches", "stats_format_s", "dumps"}; a CUDA-graph pass unformatted
    (:func:`_graph_run`) unless ``stream``. ``dump``: this pass keeps the ``--dump`` nodes'
    outputs, read back to the host after its wall (``dumps``: node name -> array).

    ``wall_s`` runs from an idle device to the logits on the host, and in the full pass to the
    statistics on the host too (collected after the last node, inside the step's NVTX range);
    formatting them into dicts comes after (``stats_format_s``).
    """
    be = session.backend
    if not stream and session.can_replay_graph(feed):
        return _graph_run(session, tracer, feed, name, full, host, dump)
    be.synchronize()
    t0 = time.perf_counter()
    tracer.begin_step(name, full, dump)
    try:
        logits = session.run_step(feed, node_hook=tracer)[-1]
        if full:
            tracer.collect_stats()
    finally:
        tracer.end_step()
    wall = time.perf_counter() - t0  # logits and statistics are on the host: the device is idle
    nodes = tracer.results()
    return {
        "nodes": nodes,
        "logits": logits,
        "launch_mode": tracer.timer.launch_mode,
        "span_ns": tracer.span_ns,
        "dumps": tracer.take_dumps(),
        "wall_s": wall,
        "stats_s": tracer.stats_s,
        "stats_collects": tracer.stats_collects,
        "stats_launches": tracer.stats_launches,
        "stats_format_s": tracer.stats_format_s,
    }


def _graph_run(
    session: Any,
    tracer: Tracer,
    feed: list[int],
    name: str,
    full: bool,
    host: _HostBuffers | None = None,
    dump: bool = False,
) -> dict[str, Any]:
    """A decode step's pass as one CUDA graph launch (see the module docstring): the timing
    pass a ``timed`` graph, the full pass a ``full`` one (statistics kernels inside). Returns
    the pass's host copies, unformatted (:func:`_graph_format`), into one of ``host``'s
    buffers when given."""
    be, replay, n_past = session.backend, session.replay, session.n_past
    spec = tracer.stats_spec if full else None
    kind = "full" if full else "timed"
    out = host.take(kind) if host is not None else None
    replay.prime(session.check_step(feed)[0], n_past)  # warm the submission path (prime())
    be.synchronize()
    t0 = time.perf_counter()
    tracer.ranges.push(tracer.ranges.attrs(name, "step"))
    try:
        session.replay_graph(feed, kind, spec)
        t1 = time.perf_counter()
        host_logits, stamps, results = replay.read_pass(out)  # one copy: logits, stamps, stats
        stats_s = time.perf_counter() - t1 if full else 0.0
        logits = np.asarray(host_logits, dtype=np.float32)[-1]
    finally:
        tracer.ranges.pop_all()
    wall = time.perf_counter() - t0  # logits, timestamps and statistics are on the host
    # --dump: the graph's output buffers (or its in-graph copies of outputs overwritten in
    # place), read after the pass's wall and before the next pass rewrites them
    dumps = (
        {tracer.nodes[i].name: np.array(be.to_host(replay.output_of(i, kind)))
         for i in sorted(tracer.dump_ids)}
        if dump else {}
    )  # fmt: skip
    return {"full": full, "n_past": n_past, "logits": logits, "stamps": stamps,
            "results": results, "wall_s": wall, "stats_s": stats_s, "dumps": dumps}  # fmt: skip


def _graph_format(session: Any, raw: dict[str, Any]) -> dict[str, Any]:
    """A graph pass's node records from its host copies (the bookkeeping after a pass, as
    :meth:`Tracer.results` is for the other passes)."""
    replay, full, wall = session.replay, raw["full"], raw["wall_s"]
    t2 = time.perf_counter()
    timing, records = replay.node_times(raw["n_past"], raw["stamps"])
    stats = {k: compact_stats(v) for k, v in raw["results"].format().items()} if full else {}
    format_s = time.perf_counter() - t2
    host = wall / len(records)
    # every launch timed on the GPU clock (stamps.py, graph plan); a node's time is the sum of
    # its launches'; queued unknown: everything was queued at the graph's launch
    nodes = [
        {
            "time_s": timing.node_time_s[i],
            "interval": timing.nodes[i],
            "host_s": host,
            "launches": launch_json(records[i], timing.launch_json(i)),
            "stats": stats[i] if full else None,
            "shape": [int(d) for d in o.shape],
            "dtype": np.dtype(o.dtype).name,
        }
        for i, o in enumerate(replay.outs)
    ]
    return {
        "nodes": nodes,
        "logits": raw["logits"],
        "launch_mode": "graph",
        "span_ns": int(timing.span_ns),
        "dumps": raw["dumps"],
        "wall_s": wall,
        "stats_s": raw["stats_s"],
        "stats_collects": 1 if full else 0,
        "stats_launches": len(replay.prepared_launches) if full else 0,
        "stats_format_s": format_s,
    }
