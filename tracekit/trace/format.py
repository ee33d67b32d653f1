"""Trace file v2 (v1 still loads): write atomically, load with validation (docs/trace-format.md).

The JSON Schema in ``trace-schema-v2.json`` is the contract; :func:`load_trace` validates with
the ``jsonschema`` library and adds the cross-references a schema cannot state (every step holds
one record per topology node, in order). Errors name the file, the JSON path and what is wrong.
A file stores measurements only; the verdicts (``perf``, ``classification``, each step's
``breakdown``) are derived on load by :func:`tracekit.trace.perf.derive_trace`, so a v1 trace
is judged by the current bound model too (marked ``derived.legacy``).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import itertools
import json
import math
import os
import re
import secrets
import socket
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from jsonschema.exceptions import best_match

from tracekit.trace import perf

FORMAT = "tracekit-trace"
VERSION = 2
SCHEMA_PATH = Path(__file__).with_name("trace-schema-v2.json")
#: Longest excerpt of an offending value quoted in an error message (characters).
_QUOTE = 60
#: The error reported is the most relevant (jsonschema's ``best_match``) of the first this many:
#: enough for any real mistake, and a million bad items cost microseconds instead of seconds.
_MAX_ERRORS = 100


#: Limits of a trace file, checked before the expensive part of loading (the file size before
#: it is read; the counts and name lengths right after the JSON is decoded, before the schema
#: pass, which takes ~70 ms per step of 460 nodes). Exceeding one is a TraceError that names it.
#: A 270M-parameter model's full capture is ~2.4 MB per step, the demo model's ~0.09 MB.
MAX_TRACE_BYTES = 1 << 30
MAX_TRACE_NODES = 65_536  # also the schema's maxItems for $.nodes and a step's records
MAX_TRACE_STEPS = 2_048
MAX_NAME_CHARS = 256  # a node's name, op and family (ggml's tensor names are < 64 bytes)


class TraceError(ValueError):
    """A trace file is missing, malformed, from a newer version or fails the schema."""


@functools.cache
def schema() -> dict[str, Any]:
    """The JSON Schema (versions 1 and 2) as a dict."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


@functools.cache
def _validator() -> Any:
    """The v1 schema's validator: jsonschema's Draft 2020-12 with two keywords sped up.

    ``properties`` and ``items`` check a value against a leaf schema (a type, bounds, an enum)
    inline and hand everything else, and every value they are not sure of, to the library's own
    implementation, so verdicts and error messages are the library's. With the refs inlined this
    validates a 24-layer x 33-step trace (15,000 node records) several times faster.

    A hostile file must be refused as fast: ``items`` does not look into an array longer than the
    ``maxItems`` beside it (that keyword refuses the array), and ``type`` and ``maxItems`` word
    their errors about a large array or object without the library's ``repr`` of all of it (a
    24 MB file). :func:`validate_trace` picks the error to report among the first
    ``_MAX_ERRORS`` only.
    """
    from jsonschema import Draft202012Validator, validators

    global _LIBRARY_TYPE
    _LIBRARY_TYPE = Draft202012Validator.VALIDATORS["type"]
    Draft202012Validator.check_schema(schema())
    fast = validators.extend(
        Draft202012Validator,
        {
            "items": _fast_items,
            "properties": _fast_properties,
            "type": _type,
            "maxItems": _max_items,
        },
    )
    return fast(_inline_refs(schema(), schema()["$defs"]))


def _inline_refs(node: Any, defs: dict[str, Any]) -> Any:
    # The v1 schema has no recursion: substituting every local $ref (merged with its sibling
    # keywords, which never clash) spares the validator a reference lookup per value.
    if isinstance(node, dict):
        out = {k: _inline_refs(v, defs) for k, v in node.items() if k not in ("$defs", "$ref")}
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            target = _inline_refs(defs[ref[len("#/$defs/") :]], defs)
            assert not set(target) & set(out) - {"description"}, ref
            out = {**target, **out}
        return out
    if isinstance(node, list):
        return [_inline_refs(v, defs) for v in node]
    return node


_LEAF_KEYS = {"type", "minimum", "maximum", "exclusiveMinimum", "enum", "const", "description"}
_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "number": (int, float),
    "string": (str,),
    "boolean": (bool,),
    "null": (type(None),),
}


def _leaf_predicate(sub: Any) -> Any:
    """For a leaf schema, a predicate that is True only for values it certainly accepts."""
    if not isinstance(sub, dict) or not sub or set(sub) - _LEAF_KEYS:
        return None
    t = sub.get("type")
    names = [t] if isinstance(t, str) else list(t) if isinstance(t, list) else []
    if t is not None and (not names or any(n not in _TYPES for n in names)):
        return None
    exact = tuple(c for n in names for c in _TYPES[n])
    lo, hi, xlo = sub.get("minimum"), sub.get("maximum"), sub.get("exclusiveMinimum")
    enum = sub.get("enum", [sub["const"]] if "const" in sub else None)

    def ok(x: Any) -> bool:
        if t is not None:
            # type(x) in exact: bool is not an int here, as in JSON Schema
            if type(x) not in exact:
                return False
        if type(x) in (int, float):
            if lo is not None and x < lo:
                return False
            if hi is not None and x > hi:
                return False
            if xlo is not None and x <= xlo:
                return False
        if enum is not None:
            return any(type(x) is type(e) and x == e for e in enum)
        return True

    return ok


_PREDICATES: dict[int, Any] = {}


def _predicate(sub: Any) -> Any:
    key = id(sub)  # the inlined schema lives as long as the cached validator
    if key not in _PREDICATES:
        _PREDICATES[key] = _leaf_predicate(sub)
    return _PREDICATES[key]


def _fast_items(validator: Any, items: Any, instance: Any, schema_: Any) -> Any:
    from jsonschema import Draft202012Validator

    if isinstance(instance, list) and len(instance) > schema_.get("maxItems", len(instance)):
        return  # refused by maxItems already; checking 10^6 items would only find more errors
    if isinstance(instance, list) and "prefixItems" not in schema_:
        ok = _predicate(items)
        if ok is not None and all(ok(x) for x in instance):
            return
    yield from Draft202012Validator.VALIDATORS["items"](validator, items, instance, schema_)


_PLANS: dict[int, list[tuple[str, Any, Any]]] = {}


def _fast_properties(validator: Any, properties: Any, instance: Any, schema_: Any) -> Any:
    from jsonschema import Draft202012Validator

    if not isinstance(instance, dict):
        return
    plan = _PLANS.get(id(properties))
    if plan is None:
        plan = _PLANS[id(properties)] = [(k, v, _predicate(v)) for k, v in properties.items()]
    slow = None
    for name, sub, ok in plan:
        if name in instance and (ok is None or not ok(instance[name])):
            if slow is None:
                slow = {}
            slow[name] = sub
    if slow:
        yield from Draft202012Validator.VALIDATORS["properties"](validator, slow, instance, schema_)


#: A list or dict longer than this gets its error worded without the library's full ``repr``.
_BIG = 64
_LIBRARY_TYPE: Any = None  # jsonschema's own ``type`` keyword, set by _validator()


def _type(validator: Any, types: Any, instance: Any, schema_: Any) -> Any:
    # Not a generator: the library's own errors are handed on without a frame per value (this
    # keyword runs for most values of a trace).
    if isinstance(instance, (list, dict)) and len(instance) > _BIG:
        from jsonschema.exceptions import ValidationError

        names = types if isinstance(types, list) else [types]
        if any(validator.is_type(instance, t) for t in names):
            return ()
        return [
            ValidationError(
                f"{_json_type(instance)} {_quote(instance)} is not of type "
                + ", ".join(repr(t) for t in names)
            )
        ]
    return _LIBRARY_TYPE(validator, types, instance, schema_)


def _max_items(validator: Any, limit: Any, instance: Any, schema_: Any) -> Any:
    from jsonschema.exceptions import ValidationError

    if validator.is_type(instance, "array") and len(instance) > limit:
        yield ValidationError(f"an array of {len(instance)} items is longer than {limit}")


class _Earlier:
    """Wraps an error's path so that ``max`` prefers the earlier of two sibling errors."""

    __slots__ = ("path",)

    def __init__(self, path: Any) -> None:
        self.path = list(path)

    def __lt__(self, other: _Earlier) -> bool:
        return _path_key(other.path) < _path_key(self.path)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Earlier) and self.path == other.path

    __hash__ = None  # type: ignore[assignment]


def _path_key(path: list[Any]) -> list[tuple[int, Any]]:
    # Array indices and property names never meet at one position of sibling paths, but a
    # mutated file could make them: order ints before strings instead of raising TypeError.
    return [(0, p) if isinstance(p, int) else (1, str(p)) for p in path]


def _relevance(err: Any) -> Any:
    """jsonschema's ``relevance``, except that of sibling errors the first one wins (the
    library reports ``$.x[999999]`` of a million bad items, this ``$.x[0]``)."""
    from jsonschema.exceptions import relevance

    key = relevance(err)
    return (key[0], _Earlier(key[1]), *key[2:])


def sig(x: float | None, digits: int = 5) -> float | None:
    """A time or rate as the trace stores it: 5 significant digits (timer noise is far above
    1e-5 relative, and 17-digit floats would cost ~70 B per node record)."""
    return None if x is None else float(f"{x:.{digits}g}")


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _json_default(o: Any) -> Any:
    # numpy scalars and arrays appear wherever a statistic or a shape came from numpy.
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, (tuple, set, frozenset)):
        return list(o)
    raise TypeError(f"value of type {type(o).__name__} is not JSON-serialisable: {o!r:.{_QUOTE}}")


def _first_non_finite(obj: Any, path: str = "$") -> str | None:
    """JSON path of the first NaN/Inf float, for an error message that says where."""
    stack: list[tuple[Any, str]] = [(obj, path)]
    while stack:
        o, p = stack.pop()
        if isinstance(o, (float, np.floating)) and not math.isfinite(float(o)):
            return p
        if isinstance(o, dict):
            stack.extend((v, f"{p}.{k}") for k, v in reversed(list(o.items())))
        elif isinstance(o, (list, tuple)):
            stack.extend((v, f"{p}[{i}]") for i, v in reversed(list(enumerate(o))))
    return None


def _uniform(edges: Any) -> bool:
    n = len(edges)
    return n >= 2 and list(edges) == np.linspace(edges[0], edges[-1], n).tolist()


def _compact_hist(h: Any) -> Any:
    # Uniform bins (every histogram tracekit makes) are stored as lo/hi: 2 numbers instead of
    # 33, a fifth of a node record. load_trace expands them back, bit for bit.
    if isinstance(h, dict) and "edges" in h and _uniform(h["edges"]):
        out = {k: v for k, v in h.items() if k != "edges"}
        out["lo"], out["hi"] = float(h["edges"][0]), float(h["edges"][-1])
        return out
    return h


def _with(d: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    out = dict(d)
    out[key] = value
    return out


def _compact_record(r: Any) -> Any:
    if not isinstance(r, dict):
        return r
    r = {k: v for k, v in r.items() if k not in perf.DERIVED_RECORD}
    t = r.get("time_s")
    if (
        isinstance(t, (int, float))
        and type(r.get("timing_time_s")) is type(t)
        and r["timing_time_s"] == t
    ):
        del r["timing_time_s"]  # the same number twice; load_trace restores it
    st = r.get("stats")
    if isinstance(st, dict):
        st = dict(st)
        if "hist" in st:
            st["hist"] = _compact_hist(st["hist"])
        hm = st.get("heatmap")
        shape = r.get("shape")
        if isinstance(hm, dict) and isinstance(shape, list) and hm.get("source_shape") == shape:
            st["heatmap"] = {k: v for k, v in hm.items() if k != "source_shape"}
        r["stats"] = st
    return r


def compact(trace: dict[str, Any]) -> dict[str, Any]:
    """A shallow copy of ``trace`` in its stored form (the input is not changed).

    What is derived (``perf``, ``classification``, ``breakdown``, ``host_wait_s``,
    ``derived``: :func:`tracekit.trace.perf.derive_trace`) is not stored; :func:`load_trace`
    derives it again. Three things are stored once instead of twice and restored: uniform
    histogram edges (as ``lo``/``hi``), a node's ``timing_time_s`` equal to its ``time_s``, and a
    heatmap's ``source_shape`` equal to the node's ``shape``. Together they are a quarter of a
    node record.
    """
    steps = trace.get("steps")
    if not isinstance(steps, list):
        return trace
    trace = {k: v for k, v in trace.items() if k not in perf.DERIVED_TOP}
    new_steps = []
    for step in steps:
        if not isinstance(step, dict):
            new_steps.append(step)
            continue
        s = {k: v for k, v in step.items() if k not in perf.DERIVED_STEP}
        logits = s.get("logits")
        if isinstance(logits, dict) and "hist" in logits:
            s["logits"] = _with(logits, "hist", _compact_hist(logits["hist"]))
        if isinstance(s.get("nodes"), list):
            s["nodes"] = [_compact_record(r) for r in s["nodes"]]
        new_steps.append(s)
    return _with(trace, "steps", new_steps)


def _expand_hist(h: dict[str, Any]) -> None:
    # Back to the form readers use (edges + counts), equal bit for bit to what was compacted.
    if "edges" not in h:
        h["edges"] = np.linspace(h.pop("lo"), h.pop("hi"), len(h["counts"]) + 1).tolist()


def dumps_trace(trace: dict[str, Any]) -> str:
    """The trace as compact JSON text (``allow_nan=False``; numpy scalars converted; uniform
    histograms stored as lo/hi)."""
    try:
        return json.dumps(
            compact(trace),
            allow_nan=False,
            separators=(",", ":"),
            ensure_ascii=False,
            default=_json_default,
        )
    except ValueError as e:
        where = _first_non_finite(trace)
        if where is not None:
            raise TraceError(f"trace holds a NaN/Inf float at {where} (count them instead)") from e
        raise TraceError(f"trace is not serialisable: {e}") from e


def write_trace(trace: dict[str, Any], path: str | os.PathLike[str], validate: bool = True) -> Path:
    """Write ``trace`` to ``path`` atomically: temp file in the same folder, fsync, os.replace.

    SIGINT/SIGTERM are held until it is written. A crash at any moment leaves either the old
    file or the new one at ``path``, never a partial one (a stray ``.NAME.tmp-PID-RAND@HOST`` beside it at worst, which the next write
    to ``path`` removes once process PID is gone).

    Args:
        trace: the trace dict (numpy scalars and arrays are converted).
        path: the output file; its folder is created if missing.
        validate: check the trace against the schema first (an invalid trace is never written).

    Returns:
        The output path.

    Raises:
        TraceError: the trace holds a NaN/Inf float, is not serialisable or fails the schema.
        OSError: the folder cannot be created or written.
    """
    from tracekit.trace.outpath import held_signals

    path = Path(path)
    with held_signals() as held:  # a Ctrl-C while a big trace is serialised: written anyway
        text = dumps_trace(trace)
        if validate:
            validate_trace(json.loads(text), source=str(path))
        held["path"] = atomic_write_text(path, text)
    return path


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` via a temp file in the same folder, fsync and os.replace.

    The temp file is ``.NAME.tmp-PID-RAND@HOST`` (NAME shortened when the whole would pass 255
    bytes). A process killed (SIGKILL, power loss) between creating it and the rename leaves it
    behind; the next write to ``path`` removes such files of dead writers first
    (:func:`remove_stale_temp_files`). SIGINT/SIGTERM are held until the write is done
    (:func:`~tracekit.trace.outpath.held_signals`). A character device or FIFO at ``path`` is
    written straight through, never replaced.

    Raises:
        OutputPathError: the path cannot be written (checked first), or the write failed (a
            full disk, a quota): the message names the path.
    """
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """:func:`atomic_write_text` for bytes (a trace's tensor sidecar, tracekit/trace/tensors.py)."""
    from tracekit.trace.outpath import (
        OutputPathError,
        check_output_path,
        held_signals,
        is_stream,
        write_stream,
    )

    path = check_output_path(path)
    with held_signals() as held:
        if is_stream(path):
            held["path"] = write_stream(path, data)
            return path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OutputPathError(f"cannot create folder {path.parent}: {e.strerror}") from None
        remove_stale_temp_files(path)
        tmp = path.with_name(f"{_temp_prefix(path)}{os.getpid()}-{secrets.token_hex(4)}@{_host()}")
        try:
            fd = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600
            )
        except OSError as e:
            raise OutputPathError(f"cannot write {path}: {e.strerror}") from None
        try:
            os.fchmod(fd, _file_mode(path))  # created 0600; a trace is an ordinary file
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException as e:
            # KeyboardInterrupt included: never leave the temp file behind.
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            if isinstance(e, OSError) and e.errno is not None:  # ENOSPC, EDQUOT, EIO ...
                raise OutputPathError(f"cannot write {path}: {e.strerror}") from e
            raise
        _fsync_dir(path.parent)
        held["path"] = path
    return path


#: A temp file older than this is removed whoever wrote it (a writer on another host or in
#: another PID namespace sharing the folder, whose process cannot be looked up from here).
STALE_TEMP_S = 24 * 3600


#: Bytes a temp name adds after its prefix: PID (7 digits at most on Linux), "-", 8 hex, "@",
#: host (32 at most).
_TEMP_SUFFIX_MAX = 7 + 1 + 8 + 1 + 32


def _temp_prefix(path: Path) -> str:
    """``.NAME.tmp-``; a NAME too long for the whole temp name to fit 255 bytes is cut and
    followed by a hash of the full name (a valid 250-byte output name is not refused)."""
    prefix = f".{path.name}.tmp-"
    room = 255 - _TEMP_SUFFIX_MAX
    if len(os.fsencode(prefix)) <= room:
        return prefix
    digest = hashlib.sha1(os.fsencode(path.name)).hexdigest()[:8]
    keep = room - len(f"..~{digest}.tmp-")
    cut = os.fsencode(path.name)[:keep].decode("utf-8", errors="ignore")  # whole characters
    return f".{cut}~{digest}.tmp-"


@functools.cache
def _host() -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname())[:32] or "localhost"


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid > 0  # another user's process (EPERM) is running; a bogus pid is not
    return True


def remove_stale_temp_files(path: str | os.PathLike[str]) -> list[Path]:
    """Remove the temp files that writes to ``path`` left behind when their process died.

    A file ``.NAME.tmp-PID-RAND@HOST`` goes when HOST is this host and no process PID runs (the
    rule git uses for its gc lock), or when it is older than :data:`STALE_TEMP_S`. A live
    writer's file, this process's own and every other file are left alone.

    Returns:
        The files removed.
    """
    path = Path(path)
    pattern = re.compile(re.escape(_temp_prefix(path)) + r"([0-9]+)-[0-9a-f]{8}@(.+)")
    removed: list[Path] = []
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return removed
    now = time.time()
    for e in entries:
        m = pattern.fullmatch(e.name)
        if m is None:
            continue
        pid, host = int(m.group(1)), m.group(2)
        try:
            old = now - e.stat(follow_symlinks=False).st_mtime > STALE_TEMP_S
            if not e.is_file(follow_symlinks=False):
                continue
        except OSError:
            continue
        here = host == _host()
        if here and pid == os.getpid():
            continue  # this process's own write, in another thread
        if (here and not _pid_running(pid)) or old:
            try:
                os.unlink(e.path)
                removed.append(Path(e.path))
            except OSError:  # gone already (another writer cleaned it), or not ours to remove
                pass
    return removed


def _file_mode(path: Path) -> int:
    """The replaced file's mode, or what open() would give a new file (0666 minus umask)."""
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def _fsync_dir(folder: Path) -> None:
    # Makes the rename itself durable; not every platform lets a folder be opened.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _quote(v: Any) -> str:
    if isinstance(v, str):
        s = repr(v[: _QUOTE + 1])
    else:  # encoded lazily: a 24 MB array costs the first few items only
        s = ""
        for chunk in json.JSONEncoder(default=str).iterencode(v):
            s += chunk
            if len(s) > _QUOTE:
                break
    return s if len(s) <= _QUOTE else s[: _QUOTE - 3] + "..."


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object" if isinstance(v, dict) else type(v).__name__


def _describe(err: Any) -> str:
    """One schema error in words, with a short quote of the value instead of its full repr."""
    v, inst = err.validator, err.instance
    if v == "required":
        return err.message
    if v == "type":
        want = err.validator_value
        want = " or ".join(want) if isinstance(want, list) else want
        return f"expected {want}, got {_json_type(inst)} {_quote(inst)}"
    if v in ("const", "enum"):
        allowed = [err.validator_value] if v == "const" else err.validator_value
        return f"{_quote(inst)} is not one of {', '.join(_quote(a) for a in allowed)}"
    if v in ("maxItems", "minItems") and isinstance(inst, list):
        return f"an array of {len(inst)} items violates {v} {err.validator_value}"
    if v in ("minimum", "exclusiveMinimum", "maximum", "minLength"):
        return f"{_quote(inst)} violates {v} {err.validator_value}"
    if v == "pattern":
        return f"{_quote(inst)} does not match {err.validator_value!r}"
    if v in ("oneOf", "anyOf") and err.context:
        # "null or an object": report against the branch the value was meant for.
        ctx = [
            e for e in err.context if not (e.validator == "type" and e.validator_value == "null")
        ]
        return _describe(best_match(ctx or err.context))
    msg = err.message
    return msg if len(msg) <= 200 else msg[:197] + "..."


def validate_trace(trace: Any, source: str = "<trace>") -> dict[str, Any]:
    """Check a parsed trace: format, version, the v1 schema, then node/step cross-references.

    Raises:
        TraceError: naming ``source``, the JSON path and what is wrong.
    """
    _check_header(trace, source)
    _check_record_counts(trace, source)
    errors = itertools.islice(_validator().iter_errors(trace), _MAX_ERRORS)
    err = best_match(errors, key=_relevance)
    if err is not None:
        raise TraceError(f"{source}: invalid trace at {err.json_path}: {_describe(err)}")
    _check_references(trace, source)
    _check_ceilings(trace, source)
    return trace


def _check_record_counts(trace: dict[str, Any], source: str) -> None:
    """Cheap first: step ``j`` has index ``j`` and one record per topology node. Checked before
    the schema walks the records, which costs ~0.2 ms each (a 23 MB file of 206 copies of a
    step, or of one step's records: 3-7 s). Only where the values are there with the types and
    bounds the schema wants; anything else is the schema's to report."""
    nodes, steps = trace.get("nodes"), trace.get("steps")
    if not isinstance(nodes, list) or not isinstance(steps, list):
        return
    limit = schema()["properties"]["nodes"]["maxItems"]
    if not 0 < len(nodes) <= limit:
        return
    for j, step in enumerate(steps):
        if not isinstance(step, dict):
            continue
        index, recs = step.get("index"), step.get("nodes")
        if type(index) is int and index >= 0 and index != j:
            raise TraceError(f"{source}: invalid trace at $.steps[{j}].index: {index} != {j}")
        if isinstance(recs, list) and len(recs) != len(nodes):
            raise TraceError(
                f"{source}: invalid trace at $.steps[{j}].nodes: {len(recs)} records for "
                f"{len(nodes)} topology nodes"
            )


def _check_limits(trace: Any, source: str) -> None:
    """The counts and name lengths of :data:`MAX_TRACE_NODES` and the rest, before the schema
    pass (whose time grows with them); a malformed trace is left to the schema's messages."""
    if not isinstance(trace, dict):
        return
    nodes, steps = trace.get("nodes"), trace.get("steps")
    if isinstance(nodes, list) and len(nodes) > MAX_TRACE_NODES:
        raise TraceError(
            f"{source}: {len(nodes):,} nodes, more than the {MAX_TRACE_NODES:,} a trace may "
            "hold (MAX_TRACE_NODES)"
        )
    if isinstance(steps, list) and len(steps) > MAX_TRACE_STEPS:
        raise TraceError(
            f"{source}: {len(steps):,} steps, more than the {MAX_TRACE_STEPS:,} a trace may "
            "hold (MAX_TRACE_STEPS)"
        )
    for i, n in enumerate(nodes if isinstance(nodes, list) else ()):
        if not isinstance(n, dict):
            continue
        for key in ("name", "op", "family"):
            v = n.get(key)
            if isinstance(v, str) and len(v) > MAX_NAME_CHARS:
                raise TraceError(
                    f"{source}: $.nodes[{i}].{key} is {len(v):,} characters, more than the "
                    f"{MAX_NAME_CHARS} a name may have (MAX_NAME_CHARS): {_quote(v)}"
                )


def _check_header(trace: Any, source: str) -> None:
    """The format tag and a version this reader knows, before anything else is looked at."""
    if not isinstance(trace, dict):
        raise TraceError(f"{source}: not a tracekit trace (top level is {_json_type(trace)})")
    fmt = trace.get("format")
    if fmt != FORMAT:
        raise TraceError(
            f"{source}: not a tracekit trace ($.format is {_quote(fmt)}, expected {FORMAT!r})"
        )
    version = trace.get("version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise TraceError(f"{source}: $.version must be an integer, got {_quote(version)}")
    if version > VERSION:
        raise TraceError(
            f"{source}: trace format version {version} is newer than this tracekit reads "
            f"(version {VERSION}); upgrade tracekit to open it"
        )
    if version < 1:
        raise TraceError(f"{source}: trace format version {version} does not exist (first is 1)")


def _check_references(trace: dict[str, Any], source: str) -> None:
    nodes = trace["nodes"]
    for i, n in enumerate(nodes):
        if isinstance(n["layer"], float):  # JSON Schema's integer admits 2.0; readers index by int
            n["layer"] = int(n["layer"])
        if n["id"] != i:
            raise TraceError(
                f"{source}: invalid trace at $.nodes[{i}].id: {n['id']} != its index {i}"
            )
    seen: dict[str, int] = {}  # one pass (names.count per name took 346 s for 65,536 nodes)
    for i, n in enumerate(nodes):
        first = seen.setdefault(n["name"], i)
        if first != i:
            raise TraceError(
                f"{source}: invalid trace at $.nodes[{i}].name: node name {_quote(n['name'])} "
                f"appears twice (also $.nodes[{first}])"
            )
    for j, step in enumerate(trace["steps"]):
        where = f"$.steps[{j}]"
        if step["index"] != j:
            raise TraceError(f"{source}: invalid trace at {where}.index: {step['index']} != {j}")
        want = "prefill" if j == 0 else f"decode {j}"
        if step["name"] != want:
            raise TraceError(
                f"{source}: invalid trace at {where}.name: {step['name']!r}, expected {want!r}"
            )
        recs = step["nodes"]
        if len(recs) != len(nodes):
            raise TraceError(
                f"{source}: invalid trace at {where}.nodes: {len(recs)} records for {len(nodes)} "
                "topology nodes"
            )
        for i, r in enumerate(recs):
            if r["id"] != i:
                raise TraceError(
                    f"{source}: invalid trace at {where}.nodes[{i}].id: {r['id']} != {i}"
                )
            r.setdefault("timing_time_s", r["time_s"])
            t0, t1 = r.get("start_ns"), r.get("end_ns")
            if t0 is not None and t1 is not None and t1 < t0:
                raise TraceError(
                    f"{source}: invalid trace at {where}.nodes[{i}].end_ns: {t1} is before its "
                    f"start_ns {t0}"
                )
            st = r["stats"]
            if st is not None:
                if st["hist"] is not None:
                    _check_hist(st["hist"], f"{where}.nodes[{i}].stats.hist", source)
                if st["heatmap"] is not None:
                    st["heatmap"].setdefault("source_shape", r["shape"])
                    _check_heatmap(st["heatmap"], f"{where}.nodes[{i}].stats.heatmap", source)
        _check_hist(step["logits"]["hist"], f"{where}.logits.hist", source)


def _check_heatmap(h: dict[str, Any], where: str, source: str) -> None:
    """The codes are base64 of exactly rows * cols bytes (what every reader decodes)."""
    try:
        n = len(base64.b64decode(h["codes"], validate=True))
    except (binascii.Error, ValueError):
        raise TraceError(f"{source}: invalid trace at {where}.codes: not base64") from None
    if n != h["rows"] * h["cols"]:
        raise TraceError(
            f"{source}: invalid trace at {where}.codes: {n} bytes, expected rows * cols = "
            f"{h['rows']} * {h['cols']} = {h['rows'] * h['cols']}"
        )


def _check_hist(h: dict[str, Any], where: str, source: str) -> None:
    """Edges and counts agree, the range is ordered and its width finite (a reader draws bins
    of width (hi - lo) / bins); lo/hi histograms get their edges back (the form readers use)."""
    n = len(h["counts"])
    if "edges" in h:
        if len(h["edges"]) != (n + 1 if n else 0):
            raise TraceError(
                f"{source}: invalid trace at {where}: {len(h['edges'])} edges for {n} counts"
            )
        if n and any(b < a for a, b in zip(h["edges"], h["edges"][1:], strict=False)):
            raise TraceError(f"{source}: invalid trace at {where}.edges: not in ascending order")
        lo, hi = (h["edges"][0], h["edges"][-1]) if n else (0.0, 0.0)
    elif n == 0:
        raise TraceError(f"{source}: invalid trace at {where}: lo/hi with no counts")
    else:
        lo, hi = h["lo"], h["hi"]
    if hi < lo or not math.isfinite(hi - lo):
        raise TraceError(
            f"{source}: invalid trace at {where}: range lo {lo!r} .. hi {hi!r} must have "
            "lo <= hi and a finite width"
        )
    _expand_hist(h)


def _check_ceilings(trace: dict[str, Any], source: str) -> None:
    """The bound model divides by the ceilings (peak / bandwidth is the roofline's ridge,
    bytes / bandwidth a launch's bound): ratios that overflow to infinity are refused."""
    c = trace["ceilings"]
    bw = perf.bandwidth_ceiling(c)[0]  # the bound model's (trace/perf.py)
    peaks = [c["peak_flops"], *[v for v in (c.get("peak_flops_by_path") or {}).values() if v]]
    for peak in peaks:
        if not math.isfinite(peak / bw):
            raise TraceError(
                f"{source}: invalid trace at $.ceilings: peak {peak!r} flop/s over the "
                f"bandwidth ceiling {bw!r} B/s is not finite (a ceiling this small was not measured)"
            )


def load_trace(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate a trace file.

    Returns:
        The trace dict.

    Raises:
        TraceError: the file is missing or unreadable, not JSON (e.g. truncated), from a newer
            format version, or fails the schema; the message names the file and the JSON path.
    """
    path = Path(path)
    too_big = (
        f"{path}: more than {MAX_TRACE_BYTES:,} bytes, the size limit of a trace file "
        "(MAX_TRACE_BYTES)"
    )
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > MAX_TRACE_BYTES:
                raise TraceError(f"{too_big}: it has {size:,}")
            raw = fh.read(MAX_TRACE_BYTES + 1)  # a device or pipe (/dev/zero) has no size
    except FileNotFoundError:
        raise TraceError(f"{path}: no such trace file") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a folder, not a trace file") from None
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror or e})") from None
    if len(raw) > MAX_TRACE_BYTES:
        raise TraceError(too_big)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TraceError(f"{path}: not UTF-8 text (byte {e.start}): not a trace file") from None
    try:
        huge: list[str] = []  # integers past 64 bits: refused once the header is known good
        # An integer of 2^63 or more has 19+ digits; without such a run (every real trace) the
        # parser's own int() runs instead of a Python call per integer (10^6 ints: 0.5 s).
        long_digits = raw.translate(_DIGITS_AS_0).find(b"0" * 19) >= 0  # 25 ms for 24 MB
        trace = json.loads(
            text,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
            parse_int=(lambda t: _int64(t, huge)) if long_digits else None,
        )
    except json.JSONDecodeError as e:
        # Both mean the text ended early: an open string runs to the end of the text.
        ended = e.pos >= len(text.rstrip()) or e.msg.startswith("Unterminated string")
        hint = " (truncated?)" if ended else ""
        raise TraceError(
            f"{path}: not valid JSON{hint}: {e.msg} at line {e.lineno} column {e.colno}"
        ) from None
    except RecursionError:
        raise TraceError(f"{path}: JSON nested too deeply to be a trace") from None
    except ValueError as e:  # a NaN/Infinity literal
        raise TraceError(f"{path}: {e}") from None
    try:
        if huge:
            _check_header(trace, str(path))  # a version of 10**30 is "newer", said as such
            raise TraceError(
                f"{path}: holds the integer {huge[0][:40]}, past the 64-bit range a trace uses"
            )
        _check_limits(trace, str(path))
        return perf.derive_trace(validate_trace(trace, source=str(path)))
    except RecursionError:  # nesting json.loads accepted but the validator's recursion did not
        raise TraceError(f"{path}: JSON nested too deeply to be a trace") from None


_DIGITS_AS_0 = bytes.maketrans(b"123456789", b"000000000")


def _int64(text: str, huge: list[str]) -> int:
    value = int(text)
    if abs(value) >= 2**63:  # no count, byte total or id in a trace comes near; floats overflow
        huge.append(text)
    return value


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 parses to inf: as non-finite as an Infinity literal
        raise ValueError(f"holds the number {text}, which overflows a float (a trace has none)")
    return value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"holds the literal {name}, which a trace never contains (allow_nan=False)")


def iter_step_nodes(
    trace: dict[str, Any],
) -> Iterable[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """Yield (step, topology node, step node record) over the whole trace."""
    nodes = trace["nodes"]
    for step in trace["steps"]:
        for rec in step["nodes"]:
            yield step, nodes[rec["id"]], rec
