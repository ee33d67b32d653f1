"""Issue 16, output paths and signals: a bad ``-o`` fails before the run in one line; a device
or FIFO target is written through, never replaced; an output never destroys an input; a
SIGINT/SIGTERM during the final write does not lose the recording or leave a temp file."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.trace.test_format import make_trace
from tracekit.cli import main, record_trace_main
from tracekit.trace.format import atomic_write_text, load_trace, write_trace
from tracekit.trace.outpath import OutputPathError, check_output_path, held_signals

REPO = Path(__file__).resolve().parents[1]


def _default_signals() -> None:
    """A child's preexec_fn: SIGINT and SIGTERM at their defaults, whatever the test runner
    inherited (a background job of a non-interactive shell has SIGINT ignored, and Python then
    installs no KeyboardInterrupt handler: the tool rightly leaves a caller's choice alone)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.fixture(autouse=True)
def _python_sigint_handler():
    """This process's SIGINT as Python sets it when started normally, for the in-process tests;
    the runner's disposition restored after."""
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before if before is not None else signal.SIG_DFL)


def _one_error_line(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def _bad_targets(tmp_path: Path) -> list[tuple[str, str]]:
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    return [
        (str(tmp_path / "adir"), "is a folder"),
        ("", "output path is empty"),
        (str(tmp_path / "adir") + "/", "names a folder"),
        (str(tmp_path / "afile" / "t.json"), "afile is a file, not a folder"),
        (str(tmp_path / "afile" / "deeper" / "t.json"), "afile is a file, not a folder"),
        (str(tmp_path / ("n" * 251 + ".json")), "more than the 255"),
    ]


def test_bad_record_output_fails_before_the_run_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import tracekit.runner.record as rec

    def no_load(*a: object, **k: object) -> None:
        raise AssertionError("the model was loaded before the output path was checked")

    monkeypatch.setattr(rec, "_resolve_model", no_load)
    for target, why in _bad_targets(tmp_path):
        t0 = time.monotonic()
        rc = record_trace_main(
            ["--tokens", "1,2", "--backend", "numpy", "--no-progress", "-o", target]
        )
        assert rc == 2, target
        line = _one_error_line(capsys, why)
        assert time.monotonic() - t0 < 2.0
        assert len(line) < 300, line  # a 251-byte name is shortened in the message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "afile"]


def test_output_not_writable_names_the_folder(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes everywhere")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(OutputPathError, match="cannot write in folder .*ro.*permission denied"):
            check_output_path(ro / "t.json")
    finally:
        ro.chmod(0o700)


def test_a_250_byte_name_is_written_with_a_shortened_temp_name(tmp_path: Path) -> None:
    name = "é" * 60 + "n" * 125 + ".json"  # 250 bytes in UTF-8 (multi-byte characters cut whole)
    assert len(os.fsencode(name)) == 250
    out = write_trace(make_trace(), tmp_path / name)
    assert out.name == name and load_trace(out)["format"] == "tracekit-trace"
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_output_equal_to_an_input_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tracekit.model.demo import write_demo_model

    model = write_demo_model(tmp_path / "m.gguf")
    before = model.read_bytes()
    link = tmp_path / "alias.gguf"
    link.symlink_to(model)
    for target in (str(model), str(link)):  # the same file by another name (samefile)
        assert (
            record_trace_main([str(model), "--backend", "numpy", "--no-progress", "-o", target])
            == 2
        )
        _one_error_line(capsys, "is the input", "destroy")
    assert model.read_bytes() == before
    t = write_trace(make_trace(), tmp_path / "t.json")
    text = t.read_text()
    assert main(["export", str(t), str(t)]) == 2
    _one_error_line(capsys, "is the input")
    assert t.read_text() == text
    csv = tmp_path / "k.csv"
    csv.write_text("x")
    assert main(["ncu-import", str(t), str(csv), "-o", str(csv)]) == 2
    _one_error_line(capsys, "is the input")
    assert csv.read_text() == "x"


def test_fifo_target_is_written_through_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader_opened = threading.Event()

    def read() -> None:
        with open(fifo, "rb") as f:  # blocks until the writer opens
            reader_opened.set()
            got.append(f.read())

    # the reader must be waiting before the write (a FIFO with no reader is refused)
    th = threading.Thread(target=read, daemon=True)
    th.start()
    time.sleep(0.2)
    fd = os.open(fifo, os.O_WRONLY)  # lets the reader's open return; we close it at once
    reader_opened.wait(5)
    os.close(fd)
    th.join(5)
    got.clear()
    th = threading.Thread(target=read, daemon=True)
    th.start()
    for _ in range(50):  # until the reader has the FIFO open
        time.sleep(0.05)
        try:
            atomic_write_text(fifo, "hello fifo")
            break
        except OutputPathError as e:
            assert "nobody reads" in str(e)
    th.join(5)
    assert got == [b"hello fifo"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still a FIFO, not a regular file
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_fifo_without_reader_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(OutputPathError, match="FIFO that nobody reads"):
        atomic_write_text(fifo, "x")
    assert time.monotonic() - t0 < 2 and stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root")
def test_char_device_target_is_written_through_not_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a /dev/null of our own
    t = write_trace(make_trace(), tmp_path / "t.json")
    assert main(["export", str(t), str(null)]) == 0
    assert stat.S_ISCHR(os.stat(null).st_mode) and os.stat(null).st_rdev == os.makedev(1, 3)
    write_trace(make_trace(), null)
    assert stat.S_ISCHR(os.stat(null).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null", "t.json"]
    capsys.readouterr()


def test_process_substitution_target(tmp_path: Path) -> None:
    """``-o >(wc -c)``: /dev/fd/N is a pipe; it was a ``/dev/fd/.63.tmp-...`` error."""
    t = write_trace(make_trace(), tmp_path / "t.json")
    script = f"{sys.executable} -m tracekit export {t} >(wc -c > {tmp_path / 'n'}); wait"
    r = subprocess.run(
        ["bash", "-c", script],
        preexec_fn=_default_signals,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    for _ in range(50):
        if (tmp_path / "n").exists() and (tmp_path / "n").read_text().strip():
            break
        time.sleep(0.1)
    assert int((tmp_path / "n").read_text()) > 100


def test_enospc_names_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    real = os.fsync

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    out = tmp_path / "t.json"
    with pytest.raises(OutputPathError, match=f"cannot write {out}: No space left on device"):
        atomic_write_text(out, "x" * 1000)
    monkeypatch.setattr(os, "fsync", real)
    assert list(tmp_path.iterdir()) == []  # the temp file is gone


def test_held_signals_deliver_after_the_block() -> None:
    from tracekit.trace.outpath import InterruptedAfterWrite

    done = []
    with pytest.raises(InterruptedAfterWrite) as e:
        with held_signals() as held:
            signal.raise_signal(signal.SIGINT)
            done.append("rest of the write ran")
            held["path"] = Path("x")
    assert done and e.value.path == Path("x") and e.value.signum == signal.SIGINT
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


_WRITE_CHILD = """
import os, signal, sys, time
sys.path.insert(0, {repo!r})
import tracekit.trace.format as tr
from tracekit.cli import _run
import argparse
real = tr.dumps_trace
def slow(t):
    os.write(1, b"W")  # the final write has started
    time.sleep(1.0)
    return real(t)
tr.dumps_trace = slow
from tests.trace.test_format import make_trace
def go(_):
    tr.write_trace(make_trace(), sys.argv[1])
    return 0
sys.exit(_run(go, argparse.Namespace()))
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_during_the_final_write_finishes_it(tmp_path: Path, sig: int) -> None:
    out = tmp_path / "t.json"
    child = subprocess.Popen(
        [sys.executable, "-c", _WRITE_CHILD.format(repo=str(REPO)), str(out)],
        preexec_fn=_default_signals,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.read(1) == "W"
    child.send_signal(sig)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 128 + sig, err
    assert "Traceback" not in err
    assert err.strip() == (
        f"interrupted: the signal came during the final write, which was finished: {out} is "
        "complete"
    )
    assert load_trace(out)["format"] == "tracekit-trace"
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]  # no temp file


def test_sigterm_saves_the_completed_steps_like_ctrl_c(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    code = (
        "import os, signal, sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "import tracekit.runner.record as rec\n"
        "from tracekit.cli import record_trace_main\n"
        "real, sent = rec._step_record, []\n"
        "def step(item, *a, **k):\n"
        "    r = real(item, *a, **k)\n"
        "    if item.index == 1 and not sent:\n"
        "        sent.append(1)\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "    return r\n"
        "rec._step_record = step\n"
        "sys.exit(record_trace_main(['--tokens', '1,2,3', '--steps', '6', '--backend', "
        f"'numpy', '--no-progress', '-o', {str(out)!r}]))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], preexec_fn=_default_signals, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert r.returncode == 143, r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().startswith("interrupted: saved "), r.stderr
    t = load_trace(out)
    assert t["complete"] is False and t["run"]["stop_reason"] == "interrupted"
    assert 1 <= len(t["steps"]) < 7
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]


def _on_a_terminal(argv: list[str], tmp_path: Path) -> tuple[int, str]:
    """Run ``argv`` with stdout/stderr on a pseudo-terminal of 120 columns; (exit, output)."""
    import fcntl
    import pty
    import struct
    import termios

    m, s = pty.openpty()
    fcntl.ioctl(s, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.Popen(
        argv, stdin=s, stdout=s, stderr=s, env=env, cwd=tmp_path, preexec_fn=_default_signals
    )
    os.close(s)
    out = b""
    while True:
        try:
            chunk = os.read(m, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(m)
    return p.wait(timeout=120), out.decode("utf-8", errors="replace")


def _shown_lines(out: str) -> list[str]:
    """What a terminal shows: each line's text after its last carriage return, erase-line
    sequences dropped."""
    lines = (ln.rstrip("\r").rsplit("\r", 1)[-1].replace("\x1b[K", "") for ln in out.split("\n"))
    return [ln for ln in lines if ln.strip()]


def test_record_trace_says_what_it_does_and_its_bar_stays(tmp_path: Path) -> None:
    rc, out = _on_a_terminal(
        [sys.executable, "-m", "tracekit", "record-trace", "--steps", "2", "--backend", "numpy",
         "-o", str(tmp_path / "t.json")], tmp_path,
    )  # fmt: skip
    assert rc == 0, out
    assert "loading the demo model ..." in out and "warm-up" in out  # before the bar
    shown = _shown_lines(out)
    assert "100%" in shown[0] and "3/3" in shown[0], shown  # the bar stays
    assert shown[1].startswith("writing 3 step(s) to ") and shown[2].startswith("wrote ")


def test_an_error_after_a_status_line_is_one_line_on_a_terminal(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 100)
    rc, out = _on_a_terminal(
        [sys.executable, "-m", "tracekit", "record-trace", str(bad), "-o", "t.json"], tmp_path
    )
    assert rc == 2
    shown = _shown_lines(out)
    assert len(shown) == 1 and shown[0].startswith("error: bad.gguf: "), shown


def test_readme_outputs_leave_no_untracked_file() -> None:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    paths = ["traces/demo-numpy.json", "traces/demo-cupy.json", "traces/run.json",
             "traces/run.perfetto.json", "traces/demo-local.json"]  # fmt: skip
    r = subprocess.run(["git", "check-ignore", *paths], cwd=REPO, capture_output=True, text=True)
    assert r.stdout.split() == paths, r.stdout + r.stderr


def test_sigterm_inside_exec_run_code_still_exits_143(tmp_path: Path) -> None:
    """A SIGTERM whose KeyboardInterrupt is raised in code ``exec`` runs from a string (as
    dataclasses do while gguf imports) set CPython's unhandled-interrupt flag, and under
    ``python -m`` the process then killed itself with SIGINT (-2) instead of exiting 143."""
    (tmp_path / "probe16.py").write_text(
        "import argparse, sys\n"
        "from tracekit.cli import _run\n"
        "def go(_):\n"
        "    exec('import os, signal\\nos.kill(os.getpid(), signal.SIGTERM)\\nx = 1')\n"
        "    return 0\n"
        "sys.exit(_run(go, argparse.Namespace()))\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path}"}
    r = subprocess.run(
        [sys.executable, "-m", "probe16"], capture_output=True, text=True, env=env, timeout=60,
        preexec_fn=_default_signals,
    )  # fmt: skip
    assert r.returncode == 143, (r.returncode, r.stderr)
    assert r.stderr.strip() == "error: interrupted"


def test_an_error_that_a_signal_caused_is_reported_as_the_interruption(tmp_path: Path) -> None:
    """numpy turns a KeyboardInterrupt inside its C import into an ImportError, and a second
    import of it fails again: a SIGTERM 0.04 s into a run printed a traceback."""
    code = (
        "import argparse, os, signal, sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "import tracekit.cli as cli\n"
        "def go(_):\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        for _ in range(10**6): pass\n"
        "    except KeyboardInterrupt:\n"
        "        raise ImportError('PyCapsule_Import could not import module datetime')\n"
        "    return 0\n"
        "sys.exit(cli._run(go, argparse.Namespace()))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], preexec_fn=_default_signals, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert r.returncode == 143 and r.stderr.strip() == "error: interrupted", r.stderr
