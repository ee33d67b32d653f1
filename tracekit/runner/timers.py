"""A node timer per backend, one interface: GPU stamps on CuPy
(:class:`~tracekit.runner.stamps.StampTimer`), the host clock on NumPy (:class:`HostTimer`).

The tracer times every node with it (``record.Tracer``), and ``Model.weights`` the w16 cache's
warm-up (the trace's ``load`` phase): ``begin`` once, ``start``/``stop`` around each node,
``end`` once, then ``times``, ``intervals`` and ``launch_times``.
"""

from __future__ import annotations

import time
from typing import Any

from tracekit.runner.stamps import StampTimer
from tracekit.trace.format import sig


class HostTimer:
    """NumPy: the node's time is the host time of its call; its interval is on the host clock
    from the step's begin (the CPU runs a node when the host calls it: any gap before a node is
    the host's own work, so ``queued`` = its start)."""

    launch_mode = "host"

    def __init__(self, n: int) -> None:
        self.t = [0.0] * n
        self.start_ns = [0] * n
        self.end_ns = [0] * n
        self._t0 = 0
        self._begin = 0
        self._span = 0

    def begin(self) -> None:
        self._begin = time.perf_counter_ns()

    def mark(self, i: int) -> None:
        pass  # the host clock needs no queued marker: a node is queued when it starts

    def start(self, i: int) -> None:
        self._t0 = time.perf_counter_ns()

    def stop(self, i: int) -> None:
        t1 = time.perf_counter_ns()
        self.t[i] = (t1 - self._t0) * 1e-9
        self.start_ns[i] = self._t0 - self._begin
        self.end_ns[i] = t1 - self._begin

    def end(self) -> None:
        self._span = time.perf_counter_ns() - self._begin

    def times(self, ran: int) -> list[float]:
        return self.t[:ran]

    def intervals(self, ran: int) -> tuple[list[tuple[int, int, int | None]], int]:
        """(per node (start_ns, end_ns, queued_ns), the step's span in ns)."""
        return [(self.start_ns[i], self.end_ns[i], self.start_ns[i]) for i in range(ran)], max(
            self._span, self.end_ns[ran - 1] if ran else 0
        )

    def launch_times(self, ran: int) -> list[list[dict[str, Any]]]:
        """Per node, its one launch's host-clock timing (a NumPy node is one call: its launch
        is the call). A node of several launch records (the f16 matmul's convert and GEMM are
        one ``astype`` and one ``matmul`` inside one call) gets none: the host clock runs
        around the call, not around each part (:func:`launch_json` then pairs nothing)."""
        return [
            [
                {
                    "time_s": sig(self.t[i]),
                    "start_ns": self.start_ns[i],
                    "end_ns": self.end_ns[i],
                    "queued_ns": self.start_ns[i],
                }
            ]  # fmt: skip
            for i in range(ran)
        ]


def node_timer(be: Any, n: int) -> HostTimer | StampTimer:
    """n node slots timed on ``be``'s clock: per-launch GPU stamps on cupy, the host clock on
    numpy (the load phase's dequant nodes use it too, ``execute.Model._prepare``): ``begin``
    once, ``start``/``stop`` around each node, ``end`` once, then ``times``."""
    return StampTimer(n) if be.name == "cupy" else HostTimer(n)
