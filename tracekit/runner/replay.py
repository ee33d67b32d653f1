"""Replaying a recorded decode step: the same launches, without the hops above the kernels.

A decode step (one token in, the last row's logits out) runs the same kernels, with the same
geometry, on arrays of the same shapes at every position. Only the token id and the position
change, and the kernels read both from the device: the step's input buffer holds the token,
the position and the logits row, and the KV store and attention read n_past from the position
(see attention.cu). So a :class:`~tracekit.runner.execute.Session` runs its first decode step
through the whole dispatch chain (every arm, gate and launcher, inside
:func:`tracekit.kernels.cuda.recording`), keeps that step's buffers, and at every later decode
step writes the new token and position into the input buffer and replays the tape:

- ``plan``: one ``cuLaunchKernel`` per kernel with its parameters packed once (CuPy's
  ``Function.__call__`` re-packs them at every call) and one ``cublasLtMatmul`` per GEMM
  (its descriptors and algorithm chosen once per shape);
- ``graph``: the whole step captured once as a CUDA graph, one ``cudaGraphLaunch`` per step.

An untraced prefill replays the same way (``Session(prefill_replay=True)``, ``run_words``): a
recording is kept per (token count, position, logits rows), so only the ids change between
its replays, written into the recorded input words (tokens, positions, rows).

What makes this sound: the tape was recorded with every gate passing for exactly these arrays,
and what varies is checked on the host before the replay (``Session.check_step``: the token is
in the vocabulary, the position within the KV cache). Node records (bytes, flops) are the
recorded ones, except attention's, which depend on n_past and are rebuilt per step.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.kernels.attention import attention_record
from tracekit.kernels.cuda import STAMPED, LaunchTape, pinned_array, recording, stamper
from tracekit.kernels.launch import LaunchRecord
from tracekit.kernels.packed import PackedLaunch, issue
from tracekit.runner import stamps
from tracekit.runner.graph import overwritten_in_place

if TYPE_CHECKING:
    from tracekit.kernels.backend import Backend
    from tracekit.runner.graph import Node

REPLAY_MODES = ("off", "plan", "graph")


class StepReplay:
    """One recorded decode step of a session, ready to replay (see the module docstring).

    Built by :meth:`record`; :meth:`run` replays it for a new token at a new position.
    """

    def __init__(
        self,
        backend: Backend,
        nodes: list[Node],
        tape: LaunchTape,
        slices: list[tuple[int, int]],
        outs: list[Any],
        records: list[list[LaunchRecord]],
        inputs: Any,
    ) -> None:
        import cupy

        self.be = backend
        self.nodes = nodes
        self.outs = outs
        self.records = records
        # the device int32 words the kernels read: [token, position, row] of a decode step,
        # [tokens, positions, rows] of a replayed prefill (Session.launch_step packs them)
        self.inputs = inputs
        # their host side, pinned: the upload is an async copy, not a synchronous pageable
        # cudaMemcpy; _inputs_read marks when the copy has read it (see set_inputs)
        n_words = int(inputs.size)
        self._host_inputs = pinned_array(n_words, np.int32)
        self._inputs_read = cupy.cuda.Event(disable_timing=True)
        self._inputs_read.record()
        self.stream_ptr = cupy.cuda.get_current_stream().ptr
        self._packed: list[PackedLaunch] = []
        self._entries = [self._pack(e, self.stream_ptr) for e in tape.entries]
        self._node_entries = [self._entries[a:b] for a, b in slices]
        self._node_tape = [tape.entries[a:b] for a, b in slices]
        # attention's record depends on n_past: rebuilt per step from the node's attributes
        self._attention = [(i, n.attrs) for i, n in enumerate(nodes) if n.op == "attention"]
        self._thunks = [functools.partial(self._run_node, i) for i in range(len(nodes))]
        # per node, its launches' plans without graphs (stamps.py); the timed entries per slot
        self._node_plan = [
            stamps.launch_plan([stamps.entry_name(e) for e in node], "stream")
            for node in self._node_tape
        ]
        self._timed: dict[tuple[int, int, Any], list[Any]] = {}
        # the graph's launches: node i's are [a, b) of the step's, in order
        self._node_launches = [(a - slices[0][0], b - slices[0][0]) for a, b in slices]
        self._graph_plan: list[tuple[str, str]] = []
        self._graphs: dict[str, Any] = {}
        self._staging: dict[str, tuple[Any, int]] = {}
        self._prepared: Any = None
        self._last_kind = "plain"
        self._graph_stream: Any = None
        self._graph_keep: list[Any] = []  # the copies the full graph writes into
        self._snaps: dict[str, dict[int, Any]] = {}  # per graph kind: node -> its copy
        self.graph_launches = 0
        #: capture the plain and timed graphs' stamped kernels as programmatic dependent
        #: launches (packed.py; set by Session(pdl=True) before the first graph is captured)
        self.pdl = False
        self._overwritten = overwritten_in_place(nodes)  # per node, for output_of

    def _pack(self, entry: Any, stream_ptr: int, pdl: bool = False) -> Any:
        if isinstance(entry, tuple):
            # only a stamped kernel waits for the grid before it (stamp.cuh's LaunchStamp)
            pdl = pdl and stamps.entry_name(entry) in STAMPED
            packed = PackedLaunch(entry, stream_ptr, pdl)
            self._packed.append(packed)  # its parameter block must outlive every replay
            return packed.args
        bind = getattr(entry, "bind", None)  # a host call (a cuBLASLt GEMM), bound to the stream
        return bind(stream_ptr) if bind is not None else functools.partial(entry, stream_ptr)

    # -- recording --------------------------------------------------------------------------
    @classmethod
    def record(
        cls,
        backend: Backend,
        nodes: list[Node],
        run: Callable[[Callable[[Node, Callable[[], Any]], Any]], Any],
        inputs: Any,
        node_hook: Callable[[Node, Callable[[], Any]], Any] | None,
    ) -> tuple[Any, StepReplay]:
        """Run one step through ``run(hook)`` (the session's normal path) while recording its
        launches; returns (the step's result, the replay)."""
        tape = LaunchTape()
        n = len(nodes)
        slices: list[tuple[int, int]] = [(0, 0)] * n
        outs: list[Any] = [None] * n
        records: list[list[LaunchRecord]] = [[] for _ in range(n)]

        def hook(node: Node, thunk: Callable[[], Any]) -> Any:
            def taped() -> Any:
                n0, r0 = len(tape), len(backend.records)
                with recording(tape):
                    out = thunk()
                slices[node.id] = (n0, len(tape))
                records[node.id] = list(backend.records[r0:])
                if node_hook is None:  # no hook takes them: as on the untraced path
                    del backend.records[r0:]
                outs[node.id] = out
                return out

            return node_hook(node, taped) if node_hook is not None else taped()

        result = run(hook)
        return result, cls(backend, nodes, tape, slices, outs, records, inputs)

    # -- replaying --------------------------------------------------------------------------
    def _refresh_records(self, n_past: int) -> None:
        for i, a in self._attention:
            recs = self.records[i]
            old = recs[-1]
            new = attention_record(
                old.kernel,
                None,
                1,
                int(a["n_head"]),
                int(a["n_head_kv"]),
                int(a["head_dim"]),
                n_past,
                int(a["window"]),
            )
            # the geometry does not depend on n_past: only the traffic and flops change
            recs[-1] = dataclasses.replace(
                old, bytes_read=new.bytes_read, bytes_written=new.bytes_written, flops=new.flops
            )

    def _run_node(self, i: int) -> Any:
        st = stamper()
        if st is None:
            issue(self._node_entries[i])
        else:  # a timed pass (stamps.StampTimer): the node's launches with their stamps
            issue(self._timed_node(i, st))
        self.be.records.extend(self.records[i])
        return self.outs[i]

    def _timed_node(self, i: int, st: Any) -> list[Any]:
        """Node i's packed launches timed in ``stream`` mode into ``st``'s buffer (packed once
        per buffer and slot: a node takes the same slots at every step)."""
        k = st.reserve(self._node_plan[i])
        key = (i, k, st.slots_key)
        got = self._timed.get(key)
        if got is None:
            got = self._timed[key] = [
                self._pack(e, self.stream_ptr)
                for j, entry in enumerate(self._node_tape[i])
                for e in stamps.timed_entries(entry, k + j, st.buf, self._node_plan[i][j], st.gate)
            ]
        return got

    def set_inputs(self, token: int, n_past: int) -> None:
        """Write a decode step's token and position into the device input buffer (row 0)."""
        self.set_input_words((token, n_past, 0))

    def set_input_words(self, words: Any) -> None:
        """Write the step's input words (as recorded: tokens, positions, rows) into the device
        input buffer, as an async copy on the current stream from the pinned host buffer
        (after the previous copy has read it)."""
        import cupy

        self._inputs_read.synchronize()
        self._host_inputs[:] = words  # a count other than the recorded one raises here
        stream = cupy.cuda.get_current_stream()
        self.inputs.data.copy_from_host_async(
            self._host_inputs.ctypes.data, self._host_inputs.nbytes, stream
        )
        self._inputs_read.record(stream)

    def prime(self, token: int, n_past: int) -> None:
        """Upload the step's inputs and wait, before a timed pass starts its clock.

        After the tracer's host work between passes (node records, statistics formatting), the
        next CUDA call on the H200 VM costs 50-100 us more than in a tight loop (BENCHMARKS.md,
        "Capture overhead"): without this the timed wall would charge that to the pass. The
        pass uploads the same inputs again inside its wall, as an untraced step does.
        """
        import cupy

        self.set_inputs(token, n_past)
        cupy.cuda.get_current_stream().synchronize()

    def run(
        self,
        token: int,
        n_past: int,
        node_hook: Callable[[Node, Callable[[], Any]], Any] | None = None,
    ) -> Any:
        """Replay the step for ``token`` at position ``n_past``; returns the logits array."""
        self._check_stream()
        self.set_inputs(token, n_past)
        if node_hook is None:
            issue(self._entries)
            self.be.records.clear()
        else:
            self._refresh_records(n_past)  # the hook takes each node's records
            for node, thunk in zip(self.nodes, self._thunks, strict=True):
                node_hook(node, thunk)
        return self.outs[-1]

    def _check_stream(self) -> None:
        import cupy

        if cupy.cuda.get_current_stream().ptr != self.stream_ptr:
            raise RuntimeError("the step was recorded on another CUDA stream than the current one")

    def run_words(self, words: Any, graph: bool) -> Any:
        """Replay the step, untraced, for new input words (a prefill: the recorded count of
        tokens at the recorded positions, other ids), its launches one by one (``plan``) or as
        one CUDA graph; returns the last node's output."""
        if graph:
            self.set_input_words(words)
            return self._launch_graph("plain", None)
        self._check_stream()
        self.set_input_words(words)
        issue(self._entries)
        self.be.records.clear()
        return self.outs[-1]

    # -- CUDA graph --------------------------------------------------------------------------
    def capture_graph(self, kind: str = "plain", stats_spec: Any = None) -> Any:
        """Capture the whole step as a CUDA graph on a private stream (once per ``kind``).

        Kinds: ``plain`` (the launches only); ``timed`` (every launch timed by its ``graph``
        plan, tracekit/runner/stamps.py: the stamped kernels write their own start and end into
        their slots, an unstamped launch runs from the previous end to the next start, and one
        ``globaltimer_stamp`` kernel after the last node closes the step; no launch is added
        between nodes); ``full`` (timed, plus the
        statistics of every node's output: a device copy right after the node of each output a
        later node overwrites in place, and the statistics batch's memset and two kernels after
        the last node). ``stats_spec``: per node (heatmap axes, overwritten later), for
        ``full``.
        """
        import cupy

        from tracekit.kernels.elementwise import launch_stamp
        from tracekit.kernels.stats import StatsBatch

        if kind not in ("plain", "timed", "full"):
            raise ValueError(f"graph kind {kind!r} is not plain, timed or full")
        got = self._graphs.get(kind)
        if got is not None:
            return got
        if self._graph_stream is None:
            self._graph_stream = cupy.cuda.Stream(non_blocking=True)
            self._ev_in = cupy.cuda.Event(disable_timing=True)
            self._ev_out = cupy.cuda.Event(disable_timing=True)
        stream = self._graph_stream
        n = len(self.nodes)
        # timed/full: everything the pass reads back lands in one staging buffer, so the host
        # makes one device-to-host copy per step, as an untraced step does for its logits:
        # [logits][stamp words, stamps.layout][statistics words]
        stamp_buf = staging = lay = None
        logits = self.outs[-1]
        lw = -(-int(logits.nbytes) // 8)  # logits' size in 8-byte words
        snaps: dict[int, Any] = {}
        prepared = None
        if kind == "full":
            if stats_spec is None or len(stats_spec) != n:
                raise ValueError("a full graph needs (axes, copy) for every node")
            batch = StatsBatch()
            for i, (axes, copy) in enumerate(stats_spec):
                out = self.outs[i]
                if copy:
                    out = snaps[i] = cupy.empty_like(out)
                batch.add(i, out, axes)
            prepared = batch.prepare()
            for k, it in enumerate(prepared.items):  # the batch must read the fixed buffers
                if it[1] is not snaps.get(k, self.outs[k]):
                    raise RuntimeError(f"node {self.nodes[k].name}: its output is not graphable")
        tape = [list(node) for node in self._node_tape]
        if kind != "plain":  # every launch timed by its graph plan (stamps.py)
            flat = [e for node in tape for e in node]
            plan = stamps.launch_plan([stamps.entry_name(e) for e in flat], "graph")
            lay = stamps.layout(len(flat), n)
            n_stats = prepared.n_res if prepared is not None else 0
            staging = cupy.zeros(lw + lay["words"] + n_stats, cupy.uint64)
            stamp_buf = staging[lw : lw + lay["words"]]
            tape = [
                [
                    t
                    for k in range(a, b)
                    for t in stamps.timed_entries(flat[k], k, stamp_buf, plan[k])
                ]
                for a, b in self._node_launches
            ]
            self._graph_plan = plan
        # programmatic dependent launches where asked, and in a full graph only when it copies
        # no output (a memcpy node between two kernels is no kernel a launch can depend on;
        # most steps have none: overwritten_in_place marks only in-place nodes' inputs)
        pdl = self.pdl and not snaps
        entries = [[self._pack(e, stream.ptr, pdl) for e in node] for node in tape]
        self.be.synchronize()
        with stream:
            stream.begin_capture()
            try:
                for i, node in enumerate(entries):
                    issue(node)
                    if i in snaps:
                        src, dst = self.outs[i], snaps[i]
                        cupy.cuda.runtime.memcpyAsync(
                            dst.data.ptr, src.data.ptr, src.nbytes, 3, stream.ptr
                        )  # 3: device to device
                if stamp_buf is not None:
                    launch_stamp(stamp_buf, lay["end"])  # the end of the last launch
                if prepared is not None:
                    prepared.enqueue()
                    cupy.cuda.runtime.memcpyAsync(
                        staging[lw + lay["words"] :].data.ptr, prepared.buf.data.ptr,
                        prepared.n_res * 8, 3, stream.ptr,
                    )  # fmt: skip
                if staging is not None:
                    cupy.cuda.runtime.memcpyAsync(
                        staging.data.ptr, logits.data.ptr, logits.nbytes, 3, stream.ptr
                    )
            finally:
                graph = stream.end_capture()
        self._graphs[kind] = graph
        self._graph_keep.append(snaps)
        self._snaps[kind] = snaps
        if staging is not None:
            self._staging[kind] = (staging, lw)
        if prepared is not None:
            self._prepared = prepared
        return graph

    def run_graph(
        self, token: int, n_past: int, kind: str = "plain", stats_spec: Any = None
    ) -> Any:
        """Replay the step as one graph launch, ordered after and before the current stream's
        work by two events; returns the logits array. After a ``timed`` or ``full`` replay,
        :meth:`node_times` gives each node's GPU time; after ``full``, :meth:`stats` its
        statistics."""
        self.set_inputs(token, n_past)  # on the current stream, before ev_in
        return self._launch_graph(kind, stats_spec)

    def _launch_graph(self, kind: str, stats_spec: Any) -> Any:
        import cupy

        graph = self.capture_graph(kind, stats_spec)
        cur = cupy.cuda.get_current_stream()
        self._ev_in.record(cur)
        self._graph_stream.wait_event(self._ev_in)
        graph.launch(self._graph_stream)
        self._ev_out.record(self._graph_stream)
        cur.wait_event(self._ev_out)
        self.graph_launches += 1
        self._last_kind = kind
        self.be.records.clear()
        return self.outs[-1]

    def output_of(self, i: int, kind: str) -> Any:
        """The buffer holding node ``i``'s output after a ``kind`` graph replay: the graph's
        copy of it when a later node overwrites it in place (``full`` graphs make one)."""
        snaps = self._snaps.get(kind, {})
        if i in snaps:
            return snaps[i]
        if self._overwritten[i]:
            raise ValueError(
                f"node {self.nodes[i].name}: a later node overwrites its output in place and "
                f"a {kind} graph keeps no copy of it (record with --capture full)"
            )
        return self.outs[i]

    @property
    def prepared_launches(self) -> list[LaunchRecord]:
        """The launch records of the full graph's statistics kernels."""
        return list(self._prepared.launches) if self._prepared is not None else []

    def staging_words(self, kind: str) -> int:
        """The size in 8-byte words of what :meth:`read_pass` copies after a ``kind`` graph."""
        return int(self._staging[kind][0].size)

    def read_pass(self, out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, Any]:
        """After a timed or full graph replay, with one device-to-host copy (it waits for the
        graph): (the logits, the timestamps in ns, the statistics results or None), views of
        ``out`` (uint64 [:meth:`staging_words`]) when given, else of a new array."""
        staging, lw = self._staging[self._last_kind]
        words = staging.get(out=out)
        last = self.outs[-1]
        logits = words[:lw].view(np.uint8)[: last.nbytes].view(last.dtype).reshape(last.shape)
        n_words = stamps.layout(len(self._graph_plan), len(self.nodes))["words"]
        stamp_words = words[lw : lw + n_words]
        stats = None
        if self._last_kind == "full":
            stats = self._prepared.read_words(words[lw + n_words :])
        return logits, stamp_words, stats

    def node_times(
        self, n_past: int, stamp_words: np.ndarray
    ) -> tuple[stamps.StepTiming, list[list[LaunchRecord]]]:
        """From a timed or full graph replay's stamps (:meth:`read_pass`): (the step's timing,
        each node's launch records)."""
        self._refresh_records(n_past)
        timing = stamps.read_timing(stamp_words, self._graph_plan, self._node_launches, "graph")
        return timing, [list(r) for r in self.records]
