#!/usr/bin/env python
"""Interrupted runs: SIGKILL, SIGINT and SIGTERM to `record-trace` at seeded random moments.

Each run is the real command, ``python -m tracekit record-trace --backend numpy --steps N
--no-progress -o RUN/t.json`` on the bundled demo model, in a fresh folder; half of the runs
find a previous complete trace already at the output path (pre-seeded). The model and the
device ceilings are cached once in a private ``TRACEKIT_CACHE`` first, so a run spends its time
loading, warming up, recording and writing. Six kinds of run:

    kill          SIGKILL at a moment drawn uniformly over a calibrated whole run (start-up,
                  load, warm-up, steps, the final write)
    kill-write    SIGKILL timed into the final write: the child (this script in --child mode,
                  which wraps record's ``write_trace`` to report "W" on a pipe when the final
                  write starts (serialising, checking, the temp file) and "R" just before its
                  rename) is killed at a uniform delay over 1.25x the calibrated time from the
                  write's start to the rename
    sigint        SIGINT at a uniform moment over a calibrated whole run
    sigterm       SIGTERM at a uniform moment over a calibrated whole run
    sigint-write  SIGINT (Ctrl-C) timed into the final write, as kill-write
    sigterm-write SIGTERM timed into the final write, as kill-write

What must hold (anything else is a failure, listed with its seed and moment):

- never a partial file at the output path: it is absent, byte-identical to the pre-seeded
  trace, or a new trace that ``load_trace`` accepts (complete, unless a SIGINT saved it);
- a pre-seeded trace is never lost (the path is never empty after a run that found one);
- SIGINT (SIGTERM: the same with exit 143): exit 130 and either "interrupted: saved N complete step(s) to PATH (marked
  incomplete)" with a valid trace of N steps marked ``complete: false`` at PATH, or "error:
  interrupted" (the signal came before the recording loop or after its last step) with the
  path as it was, or "interrupted: the signal came during the final write, which was finished:
  PATH is complete" with the complete trace at PATH (the write holds the signal); or the run had already finished (exit 0, complete trace); or the signal came
  before Python installed its handler (killed by SIGINT, path as it was) or after it removed
  it while exiting (killed by SIGINT, the new complete trace at the path);
- no traceback on stderr, no hang (each run is bounded). One exception, counted apart: a SIGINT
  in the interpreter's own start-up (``site``, ``runpy``, before the first line of tracekit
  runs) makes Python print its KeyboardInterrupt traceback, and no program can catch it; a
  traceback with any frame in tracekit's code is a failure.

Stray ``.t.json.tmp-PID-RAND@HOST`` files beside the output (a SIGKILL between the temp file's
creation and the rename) are allowed by the write contract and counted; the next write to the
output path must remove them (checked after each such run: a failure if one is left). After a
SIGINT or SIGTERM a stray temp file is a failure.

    python scripts/kill_test.py --kills 100 --write-kills 50 --sigints 60 --seed 0 \
        --json kill-test.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import random
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: Seconds a run may take after its signal (or in all, unsignalled) before it counts as a hang.
RUN_TIMEOUT = 120.0
INTERRUPTED = 130
MODES = ("kill", "kill-write", "sigint", "sigterm", "sigint-write", "sigterm-write")
SIGNALS = {
    "kill": signal.SIGKILL,
    "kill-write": signal.SIGKILL,
    "sigint": signal.SIGINT,
    "sigint-write": signal.SIGINT,
    "sigterm": signal.SIGTERM,
    "sigterm-write": signal.SIGTERM,
}


@dataclass
class Setup:
    workdir: Path
    env: dict[str, str]
    steps: int
    seed_trace: Path
    seed_bytes: bytes
    run_s: float = 0.0  # calibrated: Popen to exit of a whole run
    write_start_s: float = 0.0  # calibrated: Popen to the final write's start
    write_s: float = 0.0  # calibrated: the final write (temp file, fsync, rename, dir fsync)
    rename_at_s: float = 0.0  # calibrated: from the write's start to its rename


@dataclass
class Run:
    index: int
    mode: str  # one of MODES
    delay_s: float  # after start (kill, sigint) or after the write began (kill-write)
    preseeded: bool
    signalled: bool = False  # the signal was sent while the child still ran
    returncode: int | None = None
    outcome: str = ""
    ok: bool = False
    detail: str = ""
    stray_tmp: int = 0
    strays_removed: bool | None = None  # by the next write to the path (None: no stray)
    stderr: str = ""


#: ``--dump REGEX``: every run also writes a tensor sidecar (``--dump REGEX --save-logits``);
#: the checks then hold for the pair (tracekit/trace/tensors.py) and kill-write aims at the
#: sidecar's write, the first of the two.
DUMP_ARGS: list[str] = []


def _record_args(out: Path, steps: int) -> list[str]:
    return ["--backend", "numpy", "--steps", str(steps), "--no-progress", "-o", str(out),
            *DUMP_ARGS]  # fmt: skip


def _command(out: Path, steps: int, instrumented: bool) -> list[str]:
    if instrumented:
        return [sys.executable, str(Path(__file__).resolve()), "--child", "--",
                *_record_args(out, steps)]  # fmt: skip
    return [sys.executable, "-m", "tracekit", "record-trace", *_record_args(out, steps)]


def replace_after_w(fd: int, real_replace: Callable[[Any, Any], None]) -> Any:
    def replace(src: Any, dst: Any) -> None:  # a rename: "R" just before it
        os.write(fd, b"R")
        real_replace(src, dst)

    return replace


def child_main(argv: list[str]) -> int:
    """--child: record-trace with the final write reported on fd $KILL_TEST_FD ("W" ... "E")."""
    import tracekit.runner.record as record_mod
    from tracekit.cli import record_trace_main

    fd = int(os.environ["KILL_TEST_FD"])
    real, real_replace = record_mod.write_trace, os.replace
    if "--dump" in argv:  # the sidecar's write is the one announced
        import tracekit.trace.tensors as tensors_mod

        real_bytes = tensors_mod.atomic_write_bytes

        def announced_bytes(path: Any, data: bytes) -> Path:
            os.write(fd, b"W")
            out = real_bytes(path, data)
            os.write(fd, b"E")
            return out

        tensors_mod.atomic_write_bytes = announced_bytes
        os.replace = replace_after_w(fd, real_replace)
        return record_trace_main(argv)

    def announced(trace: Any, path: Any, **kw: Any) -> Path:
        os.write(fd, b"W")
        out = real(trace, path, **kw)
        os.write(fd, b"E")
        return out

    def replace(src: Any, dst: Any) -> None:  # the rename inside the write: "R" just before it
        os.write(fd, b"R")
        real_replace(src, dst)

    record_mod.write_trace = announced
    os.replace = replace  # this child process only
    return record_trace_main(argv)


def prepare(workdir: Path, steps: int) -> Setup:
    """A private cache with the demo model and the NumPy ceilings, and a pre-seed trace."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TRACEKIT_CACHE": str(workdir / "cache"), "PYTHONUNBUFFERED": "1"}
    env.pop("TRACEKIT_DEBUG", None)
    warm = (
        "from tracekit.model.demo import demo_model_path\n"
        "from tracekit.kernels.ceilings import measure_ceilings\n"
        "demo_model_path(); measure_ceilings('numpy')\n"
    )
    subprocess.run([sys.executable, "-c", warm], env=env, check=True, cwd=REPO, timeout=300)
    seed = workdir / "seed" / "t.json"  # the run's own name: a sidecar is named after it
    subprocess.run(
        [sys.executable, "-m", "tracekit", "record-trace", *_record_args(seed, 1)],
        env=env, check=True, cwd=REPO, timeout=300, capture_output=True,
    )  # fmt: skip
    return Setup(workdir, env, steps, seed, seed.read_bytes())


def _spawn(setup: Setup, out: Path, instrumented: bool) -> tuple[subprocess.Popen[str], int]:
    rfd = -1
    env = dict(setup.env)
    kw: dict[str, Any] = {}
    if instrumented:
        rfd, wfd = os.pipe()
        env["KILL_TEST_FD"] = str(wfd)
        kw["pass_fds"] = (wfd,)
    child = subprocess.Popen(
        _command(out, setup.steps, instrumented), env=env, cwd=REPO, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw,
    )  # fmt: skip
    if instrumented:
        os.close(wfd)
    return child, rfd


def _wait_marker(rfd: int, marker: bytes, deadline: float) -> float | None:
    """Block until ``marker`` is read from ``rfd``; its time, or None at EOF / the deadline."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([rfd], [], [], left)
        if not ready:
            return None
        b = os.read(rfd, 1)
        if not b:
            return None
        if b == marker:
            return time.monotonic()


def calibrate(setup: Setup, n: int = 3) -> None:
    """Median whole-run time, time to the final write and the write's own time, over n runs."""
    runs, starts, writes, renames = [], [], [], []
    for k in range(n):
        d = Path(tempfile.mkdtemp(prefix=f"cal{k}-", dir=setup.workdir))
        t0 = time.monotonic()
        child, rfd = _spawn(setup, d / "t.json", instrumented=True)
        w = _wait_marker(rfd, b"W", t0 + RUN_TIMEOUT)
        r = _wait_marker(rfd, b"R", t0 + RUN_TIMEOUT)
        e = _wait_marker(rfd, b"E", t0 + RUN_TIMEOUT)
        child.communicate(timeout=RUN_TIMEOUT)
        runs.append(time.monotonic() - t0)
        os.close(rfd)
        if child.returncode != 0 or w is None or r is None or e is None:
            raise RuntimeError(f"calibration run failed (exit {child.returncode})")
        starts.append(w - t0)
        writes.append(e - w)
        renames.append(r - w)
        shutil.rmtree(d)
    setup.run_s = statistics.median(runs)
    setup.write_start_s = statistics.median(starts)
    setup.write_s = statistics.median(writes)
    setup.rename_at_s = statistics.median(renames)


def _clip(err: str) -> str:
    return err if len(err) <= 3000 else err[:1000] + "\n...\n" + err[-2000:]


def _strays(folder: Path, out: Path) -> list[Path]:
    sidecars = folder.glob(f".{out.stem}.*.safetensors.tmp-*")
    return sorted([*folder.glob(f".{out.name}.tmp-*"), *sidecars])


def _check_sidecars(folder: Path, out: Path, trace: Any) -> str | None:
    """With --dump: the trace at the path names a sidecar that is there and matches its
    checksum, and every sidecar in the folder is a complete safetensors file (a killed run may
    leave the new one orphaned, never a partial one). None when all holds."""
    from safetensors.numpy import load_file

    from tracekit.trace.format import TraceError
    from tracekit.trace.tensors import load_tensors

    if trace is not None:
        if not trace.get("tensors"):
            return "the trace at the path names no sidecar"
        try:
            load_tensors(trace, out)
        except TraceError as e:
            return str(e)
    for f in folder.glob(f"{out.stem}.*.safetensors"):
        try:
            load_file(f)
        except Exception as e:
            return f"partial sidecar {f.name}: {e}"
    return None


def _check(setup: Setup, run: Run, out: Path, err: str) -> tuple[bool, str, str]:
    """(ok, outcome, detail) from the exit status, stderr and what is at the output path."""
    from tracekit.trace.format import TraceError, load_trace

    rc = run.returncode
    state, trace = "absent", None
    if out.exists():
        raw = out.read_bytes()
        if run.preseeded and raw == setup.seed_bytes:
            state = "previous"
        else:
            state = "new"
            try:
                trace = load_trace(out)
            except TraceError as e:
                return False, "partial-file", f"{len(raw)} bytes at the output path: {e}"
    if run.preseeded and state == "absent":
        return False, "previous-lost", "the pre-seeded trace is gone and nothing replaced it"
    if DUMP_ARGS:
        from tracekit.trace.format import load_trace

        at_path = trace if state == "new" else load_trace(out) if state == "previous" else None
        bad = _check_sidecars(out.parent, out, at_path)
        if bad is not None:
            return False, "bad-sidecar", bad
    unchanged = state in ("absent", "previous")
    if "Traceback" in err or "Fatal Python error" in err:
        if str(REPO / "tracekit") in err or not (run.mode == "sigint" and unchanged):
            return False, "traceback", _clip(err)
        # Every frame is the interpreter's own start-up (site, runpy, the stdlib imports it
        # makes): no program can catch a Ctrl-C there. Counted, not a tracekit failure.
        return (
            True,
            "SIGINT during interpreter start-up: Python's own traceback, path as it was",
            "",
        )
    complete = trace is not None and trace["complete"] is True
    n_steps = None if trace is None else len(trace["steps"])
    if rc == 0:
        if state == "new" and complete and n_steps == setup.steps + 1:
            return True, "finished before the signal", ""
        return False, "bad-finish", f"exit 0 but {state} file (complete={complete}, {n_steps})"
    if run.mode.startswith("kill"):
        if rc != -signal.SIGKILL:
            return False, "bad-exit", f"exit {rc} after SIGKILL: {err[-500:]}"
        if unchanged:
            phase = "during the write (temp file left)" if run.stray_tmp else "before the write"
            return True, f"killed {phase}: path as it was ({state})", ""
        if complete and n_steps == setup.steps + 1:
            return True, "killed after the rename: new complete trace", ""
        return False, "bad-kill-file", f"new file complete={complete} steps={n_steps}"
    # SIGINT or SIGTERM
    sig = SIGNALS[run.mode]
    name = signal.Signals(sig).name
    if run.stray_tmp:
        return False, "stray-after-signal", f"{run.stray_tmp} temp file(s) left after {name}"
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("tensor sidecar: ")]
    if rc == -sig:  # no Python handler: not yet installed, or already removed
        if unchanged:
            return True, f"killed by {name} before the handler: path as it was", ""
        if complete and n_steps == setup.steps + 1:
            return True, f"killed by {name} in the interpreter's exit: new complete trace", ""
        return False, "bad-sigint", f"killed by {name} but a {state} file is at the path"
    if rc != 128 + sig or len(lines) != 1:
        return False, "bad-sigint", f"exit {rc}, stderr {err[-500:]!r}"
    line = lines[0]
    if line.startswith("interrupted: the signal came during the final write"):
        if line.endswith(f": {out} is complete") and complete and n_steps == setup.steps + 1:
            return True, "held during the final write, delivered after it: new complete trace", ""
        return False, "bad-sigint", f"{line!r} with a {state} file (complete={complete})"
    if line.startswith("interrupted: saved "):
        want = f"to {out} (marked incomplete)"
        if state != "new" or complete or not line.endswith(want):
            return False, "bad-sigint-save", f"{line!r}; file {state}, complete={complete}"
        n = int(line.split()[2])
        if n != n_steps or trace is None or trace["run"]["stop_reason"] != "interrupted":
            return False, "bad-sigint-save", f"{line!r} but the file holds {n_steps} steps"
        return True, "saved 0 steps (valid, empty, incomplete)" if n == 0 else (
            "saved the completed steps (valid, incomplete)"
        ), ""  # fmt: skip
    if line == "error: interrupted before the first step completed; nothing written":
        if unchanged:
            return True, f"interrupted before the first step: nothing written ({state})", ""
        return False, "bad-sigint", f"{line!r} but a {state} file is at the path"
    if line == "error: interrupted as the command finished (what it wrote is complete)":
        # a Ctrl-C a finalizer swallowed (tqdm's __del__) after the trace was written
        if state == "new" and complete and n_steps == setup.steps + 1:
            return True, "'interrupted as the command finished': new complete trace", ""
        return False, "bad-sigint", f"{line!r} with a {state} file (complete={complete})"
    if line == "error: interrupted":
        if unchanged:
            return True, f"'error: interrupted' outside the step loop: path as it was ({state})", ""
        if complete and n_steps == setup.steps + 1:
            return True, "'error: interrupted' after the final rename: new complete trace", ""
        return False, "bad-sigint", f"'error: interrupted' with a {state} file"
    return False, "bad-sigint", f"unexpected stderr {line!r}"


def run_one(setup: Setup, run: Run) -> Run:
    folder = setup.workdir / "runs" / f"{run.index:05d}-{run.mode}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    out = folder / "t.json"
    if run.preseeded:
        for f in setup.seed_trace.parent.iterdir():  # the trace and its sidecar, if any
            shutil.copyfile(f, folder / f.name)
    sig = SIGNALS[run.mode]
    instrumented = run.mode.endswith("-write")
    t0 = time.monotonic()
    child, rfd = _spawn(setup, out, instrumented)
    try:
        if instrumented:
            at = _wait_marker(rfd, b"W", t0 + RUN_TIMEOUT)
            if at is not None:
                time.sleep(max(0.0, at + run.delay_s - time.monotonic()))
        else:
            time.sleep(run.delay_s)
        if child.poll() is None:
            child.send_signal(sig)
            run.signalled = True
        try:
            _, err = child.communicate(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            child.kill()
            _, err = child.communicate()
            run.returncode, run.outcome, run.ok = child.returncode, "hang", False
            run.stderr = _clip(err)
            return run
    finally:
        if rfd >= 0:
            os.close(rfd)
    run.returncode = child.returncode
    run.stderr = _clip(err)
    strays = _strays(folder, out)
    run.stray_tmp = len(strays)
    run.ok, run.outcome, run.detail = _check(setup, run, out, err)
    if (
        strays and run.ok
    ):  # (only after a SIGKILL: _check fails a stray after SIGINT/SIGTERM)  # the next write to the path removes what the killed writer left
        from tracekit.trace.format import atomic_write_text

        if DUMP_ARGS:  # a sidecar's temp files: removed by the next sidecar write
            import numpy as np

            from tracekit.trace.tensors import write_sidecar

            made = write_sidecar(out, {"x": np.zeros(1, np.float32)}, {})
            (folder / made["file"]).unlink()
        atomic_write_text(out, setup.seed_bytes.decode("utf-8"))
        left = _strays(folder, out)
        run.strays_removed = not left
        if left:
            run.ok, run.outcome = False, "stray-kept"
            run.detail = f"the next write left {[p.name for p in left]}"
    if run.ok:
        shutil.rmtree(folder)
    return run


def plan(counts: dict[str, int], seed: int, setup: Setup) -> list[Run]:
    """The runs, their moments and pre-seeding drawn from ``seed`` (same seed, same plan)."""
    rng = random.Random(seed)
    runs: list[Run] = []
    # most write-timed moments fall between the write's start and the rename, the rest just
    # after the rename (during the folder's fsync)
    window = max(1.25 * setup.rename_at_s, 1e-3)
    for mode in MODES:
        for _ in range(counts.get(mode, 0)):
            timed = mode.endswith("-write")
            delay = rng.uniform(0.0, window) if timed else rng.uniform(0, setup.run_s)
            runs.append(Run(len(runs), mode, round(delay, 6), preseeded=rng.random() < 0.5))
    return runs


def campaign(
    workdir: Path,
    kills: int = 100,
    write_kills: int = 50,
    sigints: int = 60,
    seed: int = 0,
    steps: int = 12,
    jobs: int = 1,
    log: Callable[[str], Any] | None = print,
    sigterms: int = 0,
    write_sigints: int = 0,
    write_sigterms: int = 0,
    dump: str | None = None,
) -> dict[str, Any]:
    """Run the campaign in ``workdir``; returns the report (``failures`` empty when all held).

    Args:
        workdir: a scratch folder (cache, pre-seed trace, one folder per run; folders of
            failed runs are kept for inspection).
        kills, write_kills, sigints, sigterms, write_sigints, write_sigterms: runs of each
            kind (see the module docstring).
        seed: the random seed of the moments and of which runs are pre-seeded.
        steps: decode steps per run (12 takes ~2 s on 2 cores).
        jobs: runs at once.
        log: progress lines (None: quiet).
        dump: record with ``--dump DUMP --save-logits`` (:data:`DUMP_ARGS`).
    """
    t_start = time.monotonic()
    DUMP_ARGS[:] = ["--dump", dump, "--save-logits"] if dump else []
    # A shell starts background jobs (`cmd &`, nohup) with SIGINT ignored, and children inherit
    # an ignored signal: Python would then never see the SIGINTs. A handled signal is reset to
    # the default at exec, so the children get Python's usual Ctrl-C behaviour.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    setup = prepare(Path(workdir), steps)
    calibrate(setup)
    if log:
        log(
            f"calibrated: run {setup.run_s:.2f} s, final write starts at "
            f"{setup.write_start_s:.2f} s and takes {setup.write_s * 1e3:.1f} ms (rename at "
            f"{setup.rename_at_s * 1e3:.1f} ms)"
        )
    counts = {
        "kill": kills,
        "kill-write": write_kills,
        "sigint": sigints,
        "sigterm": sigterms,
        "sigint-write": write_sigints,
        "sigterm-write": write_sigterms,
    }
    runs = plan(counts, seed, setup)
    done: list[Run] = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for r in pool.map(lambda r: run_one(setup, r), runs):
            done.append(r)
            if log and (not r.ok or len(done) % 25 == 0):
                log(f"[{len(done)}/{len(runs)}] {r.mode} {r.delay_s:.3f}s: {r.outcome} {r.detail}")
    outcomes: dict[str, collections.Counter[str]] = {
        m: collections.Counter() for m in MODES if counts[m]
    }
    for r in done:
        outcomes[r.mode][r.outcome] += 1
    kinds = {m: signal.Signals(SIGNALS[m]).name for m in outcomes}
    return {
        "config": {
            **{m.replace("-", "_"): n for m, n in counts.items()},
            "seed": seed,
            "steps": steps,
            "jobs": jobs,
            "dump": dump,
            "command": " ".join(_command(Path("OUT"), steps, False)),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },  # fmt: skip
        "calibration": {
            "run_s": setup.run_s,
            "write_start_s": setup.write_start_s,
            "write_s": setup.write_s,
            "rename_at_s": setup.rename_at_s,
        },  # fmt: skip
        "runs": len(done),
        "signalled": {m: sum(r.signalled for r in done if r.mode == m) for m in outcomes},
        "preseeded": sum(r.preseeded for r in done),
        "stray_tmp_runs": sum(1 for r in done if r.stray_tmp),
        "stray_tmp_removed_by_next_write": sum(1 for r in done if r.strays_removed),
        "outcomes": {m: dict(c) for m, c in outcomes.items()},
        "signals": kinds,
        "failures": [asdict(r) for r in done if not r.ok],
        "seconds": round(time.monotonic() - t_start, 1),
    }


def summary(report: dict[str, Any]) -> str:
    lines = [
        f"{report['runs']} runs ({report['preseeded']} pre-seeded), {report['seconds']} s; "
        f"calibrated run {report['calibration']['run_s']:.2f} s, write "
        f"{report['calibration']['write_s'] * 1e3:.1f} ms",
    ]
    for mode, c in report["outcomes"].items():
        lines.append(f"{mode}: {sum(c.values())} runs, {report['signalled'][mode]} signalled")
        for outcome, n in sorted(c.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {n:5d}  {outcome}")
    lines.append(
        f"runs with a stray temp file beside the output: {report['stray_tmp_runs']} (removed by "
        f"the next write: {report['stray_tmp_removed_by_next_write']})"
    )
    lines.append(f"failures: {len(report['failures'])}")
    for f in report["failures"][:20]:
        lines.append(
            f"  #{f['index']} {f['mode']} at {f['delay_s']}s: {f['outcome']} {f['detail']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        rest = argv[1:]
        return child_main(rest[1:] if rest[:1] == ["--"] else rest)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=100, help="SIGKILLs at uniform moments")
    p.add_argument("--write-kills", type=int, default=50, help="SIGKILLs timed into the write")
    p.add_argument("--sigints", type=int, default=60, help="SIGINTs at uniform moments")
    p.add_argument("--sigterms", type=int, default=0, help="SIGTERMs at uniform moments")
    p.add_argument(
        "--write-sigints", type=int, default=0, help="SIGINTs timed into the final write"
    )
    p.add_argument(
        "--write-sigterms", type=int, default=0, help="SIGTERMs timed into the final write"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=12, help="decode steps per run")
    p.add_argument("--jobs", type=int, default=1, help="runs at once")
    p.add_argument("--workdir", type=Path, help="scratch folder (default: a new temp folder)")
    p.add_argument("--json", type=Path, help="write the report here")
    p.add_argument("--dump", metavar="REGEX", help="record with --dump REGEX --save-logits")
    a = p.parse_args(argv)
    workdir = a.workdir or Path(tempfile.mkdtemp(prefix="kill-test-"))
    report = campaign(
        workdir, a.kills, a.write_kills, a.sigints, a.seed, a.steps, a.jobs, dump=a.dump,
        sigterms=a.sigterms, write_sigints=a.write_sigints, write_sigterms=a.write_sigterms,
    )  # fmt: skip
    print(summary(report))
    if a.json:
        a.json.write_text(json.dumps(report, indent=1))
    if not report["failures"] and a.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
