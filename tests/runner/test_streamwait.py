"""The gate before a cuBLAS launch's before-stamp in stream mode (tracekit/kernels/hostflag.py,
tracekit/runner/stamps.py): the driver prototypes and constants against cuda.h (compiled with
gcc), the order of what a gated launch issues and its sequence numbers (through a flag that
records the waits and writes it is given), and the trace's note where a device has no gate.
On the GPU: tests/runner/test_streamwait_gpu.py."""

from __future__ import annotations

import ctypes
import ctypes.util
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tracekit.kernels import hostflag
from tracekit.kernels.hostflag import SEQ_MASK, Gate
from tracekit.runner import record, stamps
from tracekit.runner.stamps import SLOT_WORDS, layout, timed_entries
from tracekit.runner.timers import HostTimer
from tracekit.trace.format import load_trace

CUDA_INCLUDE = next(
    (p.parent for p in (Path("/usr/local/cuda-13.0/include/cuda.h"), Path("/usr/local/cuda/include/cuda.h"), *Path("/usr/local").glob("cuda-*/include/cuda.h")) if p.exists()),
    None,
)  # fmt: skip
S = SLOT_WORDS

_INTS = (ctypes.c_int, ctypes.c_uint, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int64)


@pytest.mark.skipif(
    CUDA_INCLUDE is None or shutil.which("gcc") is None, reason="needs cuda.h and gcc"
)
def test_driver_prototypes_and_constants_match_cuda_h(tmp_path: Path) -> None:
    """Each entry point of hostflag.PROTOTYPES assigned to a function pointer of its declared C
    parameter types (a mismatch does not compile under -Werror); each parameter's size (and, for
    integers, signedness) as the C compiler has it against the ctypes type passed; the flags and
    codes used; and the name cuda.h maps cuStreamWaitValue32 to."""
    lines = []
    checks: list[int] = []
    for i, (name, params) in enumerate(hostflag.PROTOTYPES.items()):
        c_types = ", ".join(c for c, _ in params)
        # only type-checked (-fsyntax-only): the driver is not linked here
        lines.append(f"#ifdef CHECK\n  CUresult (*f{i})({c_types}) = {name}; (void)f{i};\n#endif")
        for c, t in [hostflag.RESULT, *params]:
            lines.append(f'  printf("%zu\\n", sizeof({c}));')
            checks.append(ctypes.sizeof(t))
            if t in _INTS:
                lines.append(f'  printf("%d\\n", (int)(({c})-1 > ({c})0));')
                checks.append(int(t(-1).value > 0))
    for c, v in (("CU_STREAM_WAIT_VALUE_GEQ", hostflag.CU_STREAM_WAIT_VALUE_GEQ),
                 ("CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY",
                  hostflag.CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY),
                 ("cudaDevAttrCanMapHostMemory", hostflag.CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY),
                 ("CUDA_ERROR_NOT_SUPPORTED", hostflag.CUDA_ERROR_NOT_SUPPORTED),
                 ("cudaHostAllocMapped", hostflag.HOST_ALLOC_MAPPED),
                 ("(cuuint32_t)-1", SEQ_MASK)):  # fmt: skip
        lines.append(f'  printf("%lld\\n", (long long)({c}));')
        checks.append(v)
    src = tmp_path / "protos.c"
    src.write_text(
        "#include <stdio.h>\n#include <cuda.h>\n#include <driver_types.h>\n"
        "#define STR(x) #x\n#define XSTR(x) STR(x)\n"
        "int main(void) {\n" + "\n".join(lines) + "\n"
        '  printf("%s\\n", XSTR(cuStreamWaitValue32));\n  return 0;\n}\n'
    )
    exe = tmp_path / "protos"
    for how in (["-fsyntax-only", "-DCHECK"], ["-o", str(exe)]):
        r = subprocess.run(["gcc", "-Werror", f"-I{CUDA_INCLUDE}", *how, str(src)],
                           capture_output=True, text=True)  # fmt: skip
        assert r.returncode == 0, r.stderr[-3000:]
    *got, mapped = subprocess.run([str(exe)], capture_output=True, text=True).stdout.split()
    assert [int(v) for v in got] == checks
    assert mapped == hostflag.WAIT_VALUE_32  # what cuda.h's cuStreamWaitValue32 calls


class _Recorder:
    """A flag that records, in one log with the launches, the waits queued and the writes made;
    ``value`` is what the flag would hold."""

    def __init__(self, log: list[Any], value: int = 0) -> None:
        self.log = log
        self.value = value

    def wait(self, stream_ptr: int, value: int) -> None:
        self.log.append(("wait", stream_ptr, value))

    def write(self, value: int) -> None:
        self.log.append(("write", value))
        self.value = value


def _met(flag: int, value: int) -> bool:
    """cuda.h's CU_STREAM_WAIT_VALUE_GEQ: (int32_t)(*addr - value) >= 0."""
    return int(np.array((flag - value) & SEQ_MASK, np.uint32).view(np.int32)) >= 0


def _issue(entries: list[Any], log: list[Any], stream_ptr: int) -> None:
    """Issue timed entries as StampTimer.issue does: a tuple is a kernel launch (here a stamp,
    logged), anything else a host call taking the stream."""
    for e in entries:
        if isinstance(e, tuple):
            log.append(e)
        else:
            e(stream_ptr)


def test_a_gated_launch_issues_hold_stamp_launch_stamp_open(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(stamps, "stamp_entry", lambda buf, word: ("stamp", word))
    log: list[Any] = []
    gate = Gate(_Recorder(log))
    buf = np.zeros(layout(3, 1)["words"], np.uint64)

    def gemm(stream_ptr: int) -> None:
        log.append(("gemm", stream_ptr))

    for k in (1, 2):  # each gated launch waits for the next sequence number
        _issue(timed_entries(gemm, k, buf, ("stamp", "stamp"), gate), log, 0xAB0)
    assert log == [
        ("wait", 0xAB0, 1), ("stamp", S), ("gemm", 0xAB0), ("stamp", S + 1), ("write", 1),
        ("wait", 0xAB0, 2), ("stamp", 2 * S), ("gemm", 0xAB0), ("stamp", 2 * S + 1), ("write", 2),
    ]  # fmt: skip
    assert not gate.pending

    # a self-timed kernel and a graph's launch from the previous end get no gate; a graph's
    # before-stamp (its end is the next start, no after-stamp) cannot be gated
    kern = ("fn", (1, 1, 1), (32, 1, 1), ("x", np.uint64(0)), 0)
    assert len(timed_entries(kern, 0, buf, ("kernel", "kernel"), gate)) == 1
    assert timed_entries(gemm, 0, buf, ("prev_end", "next_start"), gate) == [gemm]
    with pytest.raises(ValueError, match=r"launch 0: a gate .* not plan \('stamp', 'next_start'\)"):
        timed_entries(gemm, 0, buf, ("stamp", "next_start"), gate)
    # without a gate (a device that has none): the stamps either side, as before
    assert timed_entries(gemm, 1, buf, ("stamp", "stamp")) == [("stamp", S), gemm, ("stamp", S + 1)]
    assert gate.seq == 2 and [e for e in log if e[0] == "wait"][-1][2] == 2


class _ColdGemm:
    """A host call whose kernels load on its first run (matmul._GemmCall's ``loaded``)."""

    def __init__(self, log: list[Any]) -> None:
        self.log, self.loaded = log, False

    def __call__(self, stream_ptr: int) -> None:
        self.log.append(("gemm", stream_ptr))
        self.loaded = True


def test_a_launch_not_yet_loaded_runs_ungated_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its first run may wait for the whole context (CUDA lazy loading), so a hold before it
    would never be opened: it runs between its stamps with no hold, counted as cold; the next
    run of the same (now loaded) call is held as any other."""
    monkeypatch.setattr(stamps, "stamp_entry", lambda buf, word: ("stamp", word))
    log: list[Any] = []
    gate = Gate(_Recorder(log))
    buf = np.zeros(layout(3, 1)["words"], np.uint64)
    gemm = _ColdGemm(log)
    entries = timed_entries(gemm, 1, buf, ("stamp", "stamp"), gate)
    _issue(entries, log, 0xAB0)
    assert log == [("stamp", S), ("gemm", 0xAB0), ("stamp", S + 1)]
    assert gate.cold == 1 and gate.seq == 0 and not gate.pending
    _issue(entries, log, 0xAB0)  # a replay issues the same entries again: now held
    assert log[3:] == [("wait", 0xAB0, 1), ("stamp", S), ("gemm", 0xAB0), ("stamp", S + 1),
                       ("write", 1)]  # fmt: skip
    assert gate.cold == 1


@pytest.mark.parametrize("start", [SEQ_MASK - 2, 0, 2**31 - 1])
def test_gate_sequence_numbers_wrap_and_each_hold_is_unmet_until_opened(start: int) -> None:
    log: list[Any] = []
    flag = _Recorder(log, start)
    gate = Gate(flag, start)
    seen = []
    for _ in range(4):
        gate.hold(7)
        (_, _, v) = log[-1]
        assert 0 <= v <= SEQ_MASK
        assert not _met(flag.value, v), (flag.value, v)  # the stream waits here ...
        gate.open()
        assert _met(flag.value, v)  # ... until the host opens it
        seen.append(v)
    assert seen == [(start + i) & SEQ_MASK for i in range(1, 5)]


def test_a_hold_left_pending_is_opened_before_the_next() -> None:
    """A launch that raised between its hold and its open (the open entry never ran): the next
    hold, and the timer's end, open it, so the stream is never left waiting on the flag."""
    log: list[Any] = []
    gate = Gate(_Recorder(log))
    gate.hold(1)
    assert gate.pending
    gate.hold(1)
    assert log == [("wait", 1, 1), ("write", 1), ("wait", 1, 2)]
    gate.open()
    gate.open()  # nothing pending: no second write
    assert log[3:] == [("write", 2)] and not gate.pending
    with pytest.raises(ValueError, match=r"sequence number 4294967296 is not a uint32"):
        Gate(_Recorder(log), 2**32)


def test_no_gate_without_the_driver_entry_point() -> None:
    """A driver library that does not export cuStreamWaitValue32_v2 (here the C library, a real
    library without it): the reason names the entry point, and the trace's note says what the
    times then include."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    reason = hostflag.unsupported(libc)
    assert reason is not None and hostflag.WAIT_VALUE_32 in reason
    note = stamps.gate_note(reason)
    assert note.startswith("cuBLAS launch starts may include host issue time")
    assert reason in note and "no stream wait-value" in note


def test_the_device_gate_falls_back_with_the_note(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where hostflag.unsupported gives a reason, device_gate gives no gate and the note (and
    never allocates a flag)."""
    monkeypatch.setattr(hostflag, "unsupported", lambda device=None: f"device {device} says no")
    monkeypatch.setattr(hostflag, "HostFlag", None)  # calling it would raise
    stamps.device_gate.cache_clear()
    try:
        assert stamps.device_gate(3) == (None, stamps.gate_note("device 3 says no"))
    finally:
        stamps.device_gate.cache_clear()


class _UngatedTimer(HostTimer):
    """The host timer with a StampTimer's note of a device without a gate."""

    gate_note = stamps.gate_note("device 0 refuses stream memory operations")


def _cublas_notes(tmp_path: Path) -> list[str]:
    """The cuBLAS launch-start notes of a two-token CPU timing trace (one prefill, one decode)."""
    t = load_trace(record.record_trace(None, tokens=[3, 17], steps=1, backend="numpy",
                                       capture="timing", output=tmp_path / "t.json",
                                       ceilings={"copy_bandwidth_Bps": 2e10,
                                                 "launch_overhead_s": 1e-6, "peak_flops": 1e11},
                                       progress=False))  # fmt: skip
    return [n for n in t["run"]["notes"] if n.startswith("cuBLAS launch starts")]


@pytest.mark.parametrize("ungated", [False, True])
def test_the_trace_notes_ungated_cublas_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ungated: bool
) -> None:
    if ungated:
        monkeypatch.setattr(record, "node_timer", lambda be, n: _UngatedTimer(n))
    noted = _cublas_notes(tmp_path)
    assert noted == ([_UngatedTimer.gate_note] if ungated else [])


class _ColdGateTimer(HostTimer):
    """The host timer with a StampTimer's gate, one of whose launches ran unheld each pass."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.gate = Gate(_Recorder([]))

    def begin(self) -> None:
        super().begin()
        self.gate.cold += 1


def test_the_trace_notes_launches_the_gate_could_not_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(record, "node_timer", lambda be, n: _ColdGateTimer(n))
    noted = _cublas_notes(tmp_path)
    assert noted == [stamps.cold_gate_note(2)]  # a prefill and a decode pass, one each
    assert "2 launch(es)" in noted[0]
