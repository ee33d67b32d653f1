"""Per-launch device times on the GPU clock, in every launch mode (one pipeline, mode a parameter).

A timed pass gives every launch ``k`` of the step a slot of :data:`SLOT_WORDS` words in one
device buffer (stamp.cuh) and reads the buffer back once after the step. Where each launch's
start and end come from is its **plan**, :func:`launch_plan`, the same rule for the dispatch
chain, the plan replay (``stream`` mode: launched into the stream one by one) and a CUDA graph
(``graph``):

- a *stamped* kernel (``tracekit.kernels.cuda.STAMPED``) writes its own start (block 0's
  first thread on entry) and end (the grid's last thread on exit) into its slot: ``kernel``;
- any other launch (a cuBLAS GEMM, an unstamped kernel), in ``stream`` mode, has a
  ``globaltimer_stamp`` kernel queued right before it (its start) and one right after (its
  end): ``stamp``. The after-stamp runs once the launch has finished (stream order), so the
  end is late by at most the stamp kernel's start latency. The before-stamp is held back by a
  **gate** (tracekit/kernels/hostflag.py): the stream first waits on a flag in host memory
  (``cuStreamWaitValue32``), and the host opens it once the launch and the after-stamp are
  queued, so even when the GPU had run dry the before-stamp runs with the launch already
  queued behind it: the host's issue time (one cuBLASLt call) falls before the start, in the
  GPU's wait for the host, not in the launch's time. What remains is the device's own gap from
  the before-stamp to the launch's first kernel (the stamp kernel's run and the launch's start
  latency), the same as behind queued work. Order per gated launch:
  hold(seq), before-stamp, launch, after-stamp, open (``seq`` written into the flag;
  :func:`timed_entries`). A device that cannot wait on host memory (hostflag.unsupported) is
  timed as before, the before-stamp early by the host's issue time when the GPU had run dry,
  and the trace says so in ``run.notes`` (:func:`gate_note`); docs/trace-format.md;
- in ``graph`` mode no stamp kernel is added next to a launch (they cost ~0.65 µs of GPU time
  each): an unstamped launch starts at the previous launch's in-kernel end (``prev_end``; the
  matmul's convert before its GEMM) and ends at the next launch's start (``next_start``; every
  launch of a graph is queued at its launch, so the next one starts when this one is done).
  Only an unstamped launch after another unstamped one (or first in the step) gets a
  before-stamp.

Words of the buffer (:func:`layout`): ``SLOT_WORDS`` per launch, then one *marker* per node
(``stream``: a stamp kernel queued before the node's first launch, which runs when the GPU
reaches it or when the host hands it over, whichever is later: the node's ``queued_ns``), then
the step's begin and end stamps. The step's clock is 0 at the begin stamp (``stream``) or at
the first launch's start (``graph``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracekit.kernels.elementwise import SLOT_WORDS
from tracekit.kernels.hostflag import Gate
from tracekit.kernels.packed import PackedLaunch
from tracekit.trace.format import sig

START_SOURCES = ("kernel", "stamp", "prev_end")
END_SOURCES = ("kernel", "stamp", "next_start")


def launch_plan(
    names: Sequence[str | None], mode: str, stamped: frozenset[str] | None = None
) -> list[tuple[str, str]]:
    """Per launch of a step, in launch order: (where its start comes from, where its end does).

    ``names``: each launch's kernel name, None for a host call (a cuBLAS GEMM). ``mode``:
    ``stream`` or ``graph`` (module docstring). ``stamped``: the self-timing kernels (default
    ``cuda.STAMPED``)."""
    if mode not in ("stream", "graph"):
        raise ValueError(f"launch mode {mode!r} is not stream or graph")
    if stamped is None:
        from tracekit.kernels.cuda import STAMPED as stamped
    plan: list[tuple[str, str]] = []
    for name in names:
        if name in stamped:
            plan.append(("kernel", "kernel"))
        elif mode == "stream":
            plan.append(("stamp", "stamp"))
        else:
            prev_end = bool(plan) and plan[-1][1] == "kernel"
            plan.append(("prev_end" if prev_end else "stamp", "next_start"))
    return plan


def layout(n_launches: int, n_nodes: int) -> dict[str, int]:
    """Word offsets in a timed pass's stamp buffer: ``marker`` (node i's at marker + i),
    ``begin``, ``end`` and ``words`` (the buffer's size)."""
    marker = SLOT_WORDS * n_launches
    return {"marker": marker, "begin": marker + n_nodes, "end": marker + n_nodes + 1,
            "words": marker + n_nodes + 2}  # fmt: skip


@dataclass
class StepTiming:
    """A timed step read off its stamps, on the step's clock (ns from its origin).

    ``launches[k]`` = (start_ns, end_ns) of launch k; ``nodes[i]`` = (start_ns, end_ns,
    queued_ns or None) of node i (its first launch's start to its last launch's end);
    ``node_time_s[i]`` = the sum of its launches' device times; ``span_ns``: origin to the end
    stamp."""

    launches: list[tuple[int, int]]
    nodes: list[tuple[int, int, int | None]]
    node_time_s: list[float]
    node_launches: list[tuple[int, int]]
    span_ns: int

    def launch_json(self, i: int) -> list[dict[str, Any]]:
        """Node i's launches' timing fields for the trace (``time_s``, ``start_ns``,
        ``end_ns``, and the node's ``queued_ns`` on its first launch when known)."""
        a, b = self.node_launches[i]
        out = []
        for k in range(a, b):
            s, e = self.launches[k]
            d: dict[str, Any] = {"time_s": sig((e - s) * 1e-9), "start_ns": s, "end_ns": e}
            q = self.nodes[i][2]
            if k == a and q is not None:
                d["queued_ns"] = q
            out.append(d)
        return out


def read_timing(
    words: np.ndarray,
    plan: Sequence[tuple[str, str]],
    node_launches: Sequence[tuple[int, int]],
    mode: str,
) -> StepTiming:
    """A step's :class:`StepTiming` from its stamp buffer (host copy, uint64, :func:`layout`).

    ``node_launches[i]`` = (first launch, one past the last) of node i; launches are numbered in
    issue order. Raises RuntimeError when a stamp the plan needs was never written (zero)."""
    n_launch, n_nodes = len(plan), len(node_launches)
    lay = layout(n_launch, n_nodes)
    if words.size < lay["words"]:
        raise ValueError(f"stamp buffer of {words.size} words, the step needs {lay['words']}")
    w = words.astype(np.int64)

    def word(i: int, what: str) -> int:
        v = int(w[i])
        if v == 0:
            raise RuntimeError(f"the stamp of {what} was not written (word {i} is 0)")
        return v

    starts = [0] * n_launch
    ends = [0] * n_launch
    for k, (src, _) in enumerate(plan):  # the starts first: a graph's next_start reads them
        if src != "prev_end":
            starts[k] = word(SLOT_WORDS * k, f"launch {k}'s start")
    end_word = word(lay["end"], "the step's end")
    for k, (src, dst) in enumerate(plan):
        if src == "prev_end":  # launch_plan: only after a launch that stamps its own end
            if k == 0 or plan[k - 1][1] != "kernel":
                raise ValueError(f"launch {k} starts at the previous end, which is not stamped")
            starts[k] = ends[k - 1]
        if dst == "next_start":  # the next one cannot be prev_end: this end is not stamped
            ends[k] = end_word if k + 1 == n_launch else starts[k + 1]
        else:
            ends[k] = word(SLOT_WORDS * k + 1, f"launch {k}'s end")
    origin = word(lay["begin"], "the step's begin") if mode == "stream" else min(starts, default=0)
    launches = [(s - origin, max(s, e) - origin) for s, e in zip(starts, ends, strict=True)]
    nodes: list[tuple[int, int, int | None]] = []
    times: list[float] = []
    for i, (a, b) in enumerate(node_launches):
        if b < a:
            raise ValueError(f"node {i}'s launches [{a}, {b}) are not a range")
        if b == a:
            # no launch (a slice that is a view): an empty interval where the GPU was when the
            # node ran, its marker (stream) or the previous launch's end (graph), time 0
            if mode == "stream":
                s0 = max(0, word(lay["marker"] + i, f"node {i}'s marker") - origin)
                q: int | None = s0
            else:
                s0, q = (launches[a - 1][1] if a else 0), None
            nodes.append((s0, s0, q))
            times.append(0.0)
            continue
        s0, e1 = launches[a][0], max(e for _, e in launches[a:b])
        q = None
        if mode == "stream":
            q = min(word(lay["marker"] + i, f"node {i}'s marker") - origin, s0)
        nodes.append((s0, e1, q))
        times.append(sum(e - s for s, e in launches[a:b]) * 1e-9)
    return StepTiming(launches, nodes, times, list(node_launches), end_word - origin)


def stamp_entry(buf: Any, word: int) -> tuple[Any, ...]:
    """A tape entry (cuda.LaunchTape) of the ``globaltimer_stamp`` kernel writing ``buf[word]``."""
    from tracekit.kernels.cuda import kernel
    from tracekit.kernels.elementwise import FAMILY  # its -D geometry registered first

    return (kernel(FAMILY, "globaltimer_stamp"), (1, 1, 1), (1, 1, 1),
            (buf, np.int32(word)), 0)  # fmt: skip


def entry_name(entry: Any) -> str | None:
    """A tape entry's kernel name; None for a host call (a cuBLAS GEMM)."""
    return getattr(entry[0], "name", None) if isinstance(entry, tuple) else None


def gate_note(reason: str) -> str:
    """The ``run.notes`` line of a trace whose stream-mode passes time cuBLAS launches ungated
    (``reason``: hostflag.unsupported's)."""
    return (
        "cuBLAS launch starts may include host issue time: this device has no stream "
        f"wait-value ({reason}), so a before-stamp runs as soon as it is queued when the GPU "
        "has run dry"
    )


def cold_gate_note(cold: int) -> str:
    """The ``run.notes`` line of a trace in which ``cold`` gated launches ran unheld (GateHold:
    a cuBLASLt plan's first run in the process, whose kernels may still load). A recording's
    warm-up runs every plan first; only a run without it has any."""
    return (
        f"cuBLAS launch starts may include host issue time for {cold} launch(es): the first run "
        "of a cuBLASLt plan in the process is not held behind the host (loading its kernels "
        "could wait for the held stream); record with the warm-up to have none"
    )


@functools.cache
def device_gate(device: int) -> tuple[Gate | None, str | None]:
    """The gate of ``device``'s stream-mode passes (one per process and device: a 4-byte
    pinned flag), or (None, the :func:`gate_note`) where the device has no stream wait-value."""
    from tracekit.kernels import hostflag

    reason = hostflag.unsupported(device=device)
    if reason is not None:
        return None, gate_note(reason)
    return Gate(hostflag.HostFlag()), None


class GateHold:
    """A gated launch's first host entry (called with the stream, as a cuBLAS call is): the
    gate's hold, unless the launch says its kernels are not yet loaded (``loaded`` False: its
    first run, which may wait for the whole context while loading them, and so for a held
    stream: a deadlock). Such a launch runs ungated, once per plan, and is counted in
    ``gate.cold``; its start may then include host issue time."""

    __slots__ = ("gate", "launch")

    def __init__(self, gate: Gate, launch: Any) -> None:
        self.gate, self.launch = gate, launch

    def __call__(self, stream_ptr: int) -> None:
        if getattr(self.launch, "loaded", True):
            self.gate.hold(stream_ptr)
        else:
            self.gate.cold += 1


def timed_entries(
    entry: Any, k: int, buf: Any, how: tuple[str, str], gate: Gate | None = None
) -> list[Any]:
    """Launch k of a step, as the tape entries that time it by its plan ``how``: a stamped
    kernel given its slot, or the launch between stamp kernels (module docstring). With a
    ``gate`` (``stream`` mode), a launch between stamps is [hold, before-stamp, launch,
    after-stamp, open]: the GPU runs the before-stamp only once the host has issued the launch
    (:class:`GateHold`: not the first run of a launch whose kernels are not loaded)."""
    src, dst = how
    gated = gate is not None and src == "stamp"
    if gated and dst != "stamp":
        raise ValueError(
            f"launch {k}: a gate holds a stamp that the launch's own end follows (stream "
            f"mode's plan ('stamp', 'stamp')), not plan {how!r}"
        )
    out: list[Any] = []
    if gated:  # host entries, called with the stream as a cuBLAS call is
        out.append(GateHold(gate, entry))
    if src == "stamp":
        out.append(stamp_entry(buf, SLOT_WORDS * k))
    if src == "kernel":
        fn, grid, block, args, smem = entry
        if not (args and isinstance(args[-1], np.uint64) and args[-1] == 0):
            raise RuntimeError(
                f"launch {k} ({entry_name(entry)}): its launcher does not pass the stamp slot "
                "last (cuda.NO_STAMP), so no argument can be replaced by a slot"
            )
        out.append(
            (fn, grid, block, (*args[:-1], buf[SLOT_WORDS * k : SLOT_WORDS * (k + 1)]), smem)
        )
    else:
        out.append(entry)
    if dst == "stamp":
        out.append(stamp_entry(buf, SLOT_WORDS * k + 1))
    if gated:
        out.append(gate.open)
    return out


class StampTimer:
    """The tracer's timer on CuPy without graphs (dispatch chain and plan replay): every launch
    of a node timed by its plan (``stream`` mode), a marker before each node, begin and end
    stamps; read back with one copy after the step (:meth:`timing`).

    While a node runs (between :meth:`start` and :meth:`stop`) it is the active stamper of
    ``tracekit.kernels.cuda``: ``cuda.launch`` and ``cuda.host_launch`` hand it each launch
    (:meth:`issue`), and a plan replay reserves its node's slots (:meth:`reserve`) and times
    them with :attr:`gate`.

    Args:
        n: the step's node count.
        gated: hold each before-stamp behind the host's gate (:func:`device_gate`); False
            times as without one (a test's baseline). ``gate`` is None and ``gate_note`` the
            trace's note where the device cannot.
    """

    launch_mode = "stream"
    #: slots per node the buffer holds (a node launches 1-3 kernels today; a step that needs
    #: more raises, it never writes past the buffer)
    LAUNCHES_PER_NODE = 8

    def __init__(self, n: int, gated: bool = True) -> None:
        import cupy

        from tracekit.kernels import cuda
        from tracekit.kernels.packed import launch_kernel

        self._cupy = cupy
        self._stamped = cuda.STAMPED
        self._set_stamper = cuda.set_stamper
        # a stamp is one cuLaunchKernel on arguments packed once: without graphs the per-node
        # path is host-bound (BENCHMARKS.md, "2026-12-06, from 06:16 UTC")
        self._launch = launch_kernel()
        self.n = n
        self.capacity = self.LAUNCHES_PER_NODE * max(n, 1)
        self.lay = layout(self.capacity, n)
        self.buf = cupy.zeros(self.lay["words"], cupy.uint64)
        self.plan: list[tuple[str, str]] = []
        self.node_launches = [(0, 0)] * n
        self._first = 0
        self._marked = -1
        self._timing: StepTiming | None = None
        self._stamps: dict[int, PackedLaunch] = {}  # word -> its stamp, packed for `stream`
        self.stream = 0
        self.gate: Gate | None = None
        self.gate_note: str | None = None
        if gated:
            self.gate, self.gate_note = device_gate(cupy.cuda.Device().id)
        #: what packed timed launches depend on (the buffer they stamp into, the gate that holds
        #: them): a plan replay keys its packed nodes on it
        self.slots_key = (int(self.buf.data.ptr), id(self.gate))

    # -- issuing ---------------------------------------------------------------------------
    def _stamp(self, word: int) -> None:
        p = self._stamps.get(word)
        if p is None:
            p = self._stamps[word] = PackedLaunch(stamp_entry(self.buf, word), self.stream)
        self._launch(*p.args)

    def reserve(self, how: Sequence[tuple[str, str]]) -> int:
        """Take the next ``len(how)`` slots for launches with these plans; the first's index."""
        k = len(self.plan)
        if k + len(how) > self.capacity:
            raise RuntimeError(
                f"the step launches more than {self.capacity} kernels "
                f"({self.LAUNCHES_PER_NODE} per node): its stamp buffer is full"
            )
        self.plan.extend(how)
        return k

    def issue(self, entry: Any) -> None:
        """Launch one tape entry (a kernel tuple, or a host call taking the stream) timed."""
        (how,) = launch_plan([entry_name(entry)], "stream", self._stamped)
        k = self.reserve([how])
        for e in timed_entries(entry, k, self.buf, how, self.gate):
            if isinstance(e, tuple):
                fn, grid, block, args, smem = e
                fn(grid, block, args, shared_mem=smem)
            else:
                e(self._cupy.cuda.get_current_stream().ptr)

    # -- the timer interface (record.Tracer) ------------------------------------------------
    def begin(self) -> None:
        stream = self._cupy.cuda.get_current_stream().ptr
        if stream != self.stream:  # the stamps are packed for one stream
            self._stamps.clear()
        self.stream = stream
        self.plan = []
        self._timing = None
        # zero: a stamp not written is then seen (read_timing), and every slot's counter is 0
        self._cupy.cuda.runtime.memsetAsync(self.buf.data.ptr, 0, self.buf.nbytes, self.stream)
        self._stamp(self.lay["begin"])

    def mark(self, i: int) -> None:
        """Node i's queued marker, issued before the tracer opens the node's NVTX range (so a
        profiler sees only the node's own kernels inside it); :meth:`start` issues it if not."""
        self._stamp(self.lay["marker"] + i)
        self._marked = i

    def start(self, i: int) -> None:
        if self._marked != i:
            self.mark(i)
        self._marked = -1
        self._first = len(self.plan)
        self._set_stamper(self)

    def stop(self, i: int) -> None:
        self._set_stamper(None)
        self.node_launches[i] = (self._first, len(self.plan))

    def end(self) -> None:
        self._set_stamper(None)  # after an error inside a node
        self._open()
        self._stamp(self.lay["end"])

    def _open(self) -> None:
        # a launch that raised between its hold and its open leaves the stream waiting: open
        # it before anything waits on the stream
        if self.gate is not None:
            self.gate.open()

    def timing(self, ran: int) -> StepTiming:
        """The step's timing (one device-to-host copy of the stamps, after the step)."""
        if self._timing is None:
            self._open()
            self._cupy.cuda.runtime.streamSynchronize(self.stream)  # the step's stream
            words = self.buf.get()
            n = self.lay
            # the buffer is laid out for `capacity` slots: the launches used, then the tail
            used = np.concatenate(
                [words[: SLOT_WORDS * len(self.plan)], words[n["marker"] : n["words"]]]
            )
            if ran < self.n:  # an interrupted step: only the nodes that ran
                used = np.concatenate([used[: SLOT_WORDS * len(self.plan) + ran], used[-2:]])
            self._timing = read_timing(used, self.plan, self.node_launches[:ran], "stream")
        return self._timing

    def times(self, ran: int) -> list[float]:
        return self.timing(ran).node_time_s if ran else []

    def intervals(self, ran: int) -> tuple[list[tuple[int, int, int | None]], int]:
        if not ran:
            return [], 0
        t = self.timing(ran)
        return t.nodes, t.span_ns

    def launch_times(self, ran: int) -> list[list[dict[str, Any]]]:
        """Per node that ran, its launches' timing fields (:meth:`StepTiming.launch_json`)."""
        if not ran:
            return []
        t = self.timing(ran)
        return [t.launch_json(i) for i in range(ran)]
