"""Where a command's output goes: checked before the run, written without being lost.

- :func:`check_output_path` refuses a target that the final write would fail on or that would
  destroy an input, BEFORE the work starts (a bad ``-o`` used to fail after a 70 s run).
- A target that is a character device or a FIFO (``/dev/null``, ``mkfifo``, ``-o >(wc -c)``'s
  ``/dev/fd/N``) is written straight through, as ``cat > TARGET`` would: it is never renamed
  over (as root that replaced the system's ``/dev/null`` with a regular file). A FIFO with no
  reader is refused at once instead of blocking. Block devices and sockets are refused.
- :func:`held_signals` defers SIGINT and SIGTERM while a final write runs: the write finishes
  (the recording is not lost, no temp file is left) and the signal is delivered after it.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: The longest file name most file systems take (ext4, xfs, btrfs, tmpfs: 255 bytes).
NAME_MAX = 255

#: Signals that end a command cleanly (Ctrl-C and kill's default); held during a final write.
HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class OutputPathError(OSError):
    """An output path the command cannot (or must not) write; the message names the path."""


class InterruptedAfterWrite(KeyboardInterrupt):
    """A SIGINT/SIGTERM that came during a final write, delivered once the write finished:
    ``path`` is complete."""

    def __init__(self, path: Path | None, signum: int) -> None:
        super().__init__(f"interrupted after writing {path}")
        self.path = path
        self.signum = signum


def is_stream(path: Path) -> bool:
    """Whether ``path`` is a character device or a FIFO (written through, never replaced)."""
    try:
        mode = os.stat(path).st_mode  # follows /dev/fd/N and /dev/stdout to the pipe itself
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def check_output_path(
    path: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str] | None] = ()
) -> Path:
    """``path`` as a Path once it is known to be writable and not one of ``inputs``.

    Raises:
        OutputPathError: one line naming the path and what is wrong with it.
    """
    raw = os.fspath(path)
    if raw == "":
        raise OutputPathError("output path is empty: give a file name")
    p = Path(raw)
    if raw.endswith(os.sep) or p.name in ("", ".", ".."):
        raise OutputPathError(f"output {raw} names a folder: give a file name")
    name_bytes = len(os.fsencode(p.name))
    if name_bytes > NAME_MAX:
        raise OutputPathError(
            f"output file name is {name_bytes} bytes, more than the {NAME_MAX} a file system "
            f"allows: {_short(p.name)}"
        )
    for given in inputs:
        if given is not None and _same_file(p, Path(given)):
            raise OutputPathError(
                f"output {raw} is the input {os.fspath(given)}: writing it would destroy the "
                "input; give another output path"
            )
    try:
        st = os.stat(p)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        st = None  # a parent is a file: said below
    except OSError as e:
        raise OutputPathError(f"output {_short(raw, 200)}: {e.strerror}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise OutputPathError(f"output {raw} is a folder: give a file name")
        if stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode):
            return p  # written straight through (see the module docstring)
        if not stat.S_ISREG(st.st_mode):
            kind = "a block device" if stat.S_ISBLK(st.st_mode) else "a socket or special file"
            raise OutputPathError(f"output {raw} is {kind}: give a regular file")
    folder = _existing_ancestor(p.parent, raw)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputPathError(f"output {raw}: cannot write in folder {folder} (permission denied)")
    return p


def _existing_ancestor(folder: Path, raw: str) -> Path:
    """The nearest existing folder at or above ``folder`` (the write creates the rest)."""
    current = folder if str(folder) else Path(".")
    while True:
        try:
            st = os.stat(current)
        except FileNotFoundError:
            if current.parent == current:
                return current
            current = current.parent
            continue
        except NotADirectoryError:
            current = current.parent
            continue
        except OSError as e:
            raise OutputPathError(f"output {raw}: folder {current}: {e.strerror}") from None
        if not stat.S_ISDIR(st.st_mode):
            raise OutputPathError(f"output {raw}: {current} is a file, not a folder")
        return current


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # either one does not exist (or cannot be looked at): not the same file
        return False


def _short(name: str, keep: int = 60) -> str:
    return name if len(name) <= keep else f"{name[:keep]}... ({len(name)} characters)"


def write_stream(path: Path, data: bytes) -> Path:
    """Write ``data`` straight into a character device or FIFO (no temp file, no rename)."""
    flags = os.O_WRONLY | getattr(os, "O_CLOEXEC", 0)
    try:
        if stat.S_ISFIFO(os.stat(path).st_mode):
            # O_NONBLOCK: a FIFO nobody reads fails with ENXIO now instead of blocking forever
            fd = os.open(path, flags | os.O_NONBLOCK)
            os.set_blocking(fd, True)
        else:
            fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ENXIO:
            raise OutputPathError(f"output {path} is a FIFO that nobody reads") from None
        raise OutputPathError(f"cannot write {path}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BrokenPipeError:
        raise OutputPathError(f"cannot write {path}: its reader went away") from None
    except OSError as e:
        raise OutputPathError(f"cannot write {path}: {e.strerror}") from None
    return path


# -- signals held during a final write ----------------------------------------------------------
_held = threading.local()


@contextmanager
def held_signals() -> Iterator[dict[str, Any]]:
    """SIGINT/SIGTERM that come inside the block are delivered when it ends.

    Yields a dict; set its ``"path"`` to what the block wrote. A held signal is delivered to
    the handler that was in place (Python's default handler raises KeyboardInterrupt, SIGTERM's
    default ends the process, the CLI's raises); a KeyboardInterrupt from it becomes
    :class:`InterruptedAfterWrite` with that path. Nested blocks hold once, in the outermost.
    Signal handlers can only be changed in the main thread; elsewhere this holds nothing.
    """
    box: dict[str, Any] = {"path": None}
    if threading.current_thread() is not threading.main_thread() or getattr(_held, "on", False):
        yield box
        return
    came: list[int] = []
    previous = {s: signal.getsignal(s) for s in HELD_SIGNALS}

    def remember(signum: int, frame: Any) -> None:
        came.append(signum)

    _held.on = True
    try:
        for s in HELD_SIGNALS:
            signal.signal(s, remember)
        yield box
    finally:
        for s, h in previous.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
        _held.on = False
    if came:
        try:
            signal.raise_signal(came[0])
        except KeyboardInterrupt:
            raise InterruptedAfterWrite(box["path"], came[0]) from None
