#!/usr/bin/env python
"""Trace-loader fuzz campaign: mutated trace files against ``load_trace`` and the dashboard.

Mutant i of seed s is always the same file: it is derived from a real recorded trace (default:
the golden v1 trace of the demo model, ``tests/golden/trace-v1-demo-numpy.json``, as stored on
disk) by the mutation of category ``CATEGORIES[i % 14]`` with ``random.Random(f"{s}:{i}")``:

    truncate       the file cut at a random byte (a fifth of them within its last 64 bytes)
    byte_flip      1-8 random bytes overwritten
    wrong_type     a value (reached by a random walk from the root) replaced by another JSON type
    missing_key    a key of a random object deleted
    huge_array     a value replaced by an array of 10^4-10^6 elements (at most ~24 MB of text)
    huge_number    a number replaced by 1e308, 1e400, 10^400, 2^64, -0.0, 1e-400, ...
    newer_version  `version` (or `format`) changed, deleted or of another type
    bad_base64     a heatmap's codes invalid, mis-padded, of the wrong length, or rows/cols changed
    nan_literal    a number replaced by NaN, Infinity, -Infinity, nan, inf, 1e999
    deep_nesting   a value replaced by 10-100,000 nested arrays/objects (some unterminated)
    non_utf8       invalid UTF-8 bytes inserted, the file re-encoded as UTF-16/Latin-1, a BOM
    string_junk    a string replaced by a lone surrogate, NULs, 1 MB of text, HTML, a path
    references     ids, names, step indices or record counts that disagree (schema-valid types)
    value_range    counts, probabilities, times, token ids, enums out of their range

Each mutant is written to a file and read by ``load_trace`` in a worker process, bounded in time
(the parent kills a worker that overruns ``--timeout`` and counts a hang) and memory
(RLIMIT_AS). Verdicts:

    rejected         TraceError whose message starts with the file's path, one line, <= 600
                     characters (the contract)
    accepted         load_trace returned (the mutation kept the trace valid)
    non-finite-accepted  load_trace returned a trace holding a NaN/Inf float (a number such
                     as 1e400 that overflows to inf): the loader refuses the NaN/Infinity
                     literals, so it must refuse these too
    wrong-exception  any other exception escaped load_trace
    unclear-message  a TraceError without the path, on several lines, or too long
    hang / crash     the worker overran its time or died
    dashboard-*      see below

Dashboard check (every accepted mutant and every ``--dashboard-every``-th rejected one):
``create_app([path])`` must return; for a rejected file its page must be the error page naming
the file and the loader's message, served by the app's own server (Flask test client, with
exceptions propagated) for ``/`` and ``/_dash-layout``; for an accepted file the page must
load and every server callback (graph for each colour measure, selection, node detail,
timeline, roofline, tokens) must answer for the mutated step and node (or, where the mutation
has no path, for every step and the first shown node). A failure there is ``dashboard-error``
(an exception: the view breaks or the app does not start) or ``dashboard-message`` (the error
page does not say which file or what is wrong).

    python scripts/fuzz_traces.py --count 7000 --seed 0 --jobs 2 --json fuzz-traces.json
    python scripts/fuzz_traces.py --only 123 --keep /tmp/m   # reproduce one mutant
"""

from __future__ import annotations

import argparse
import base64
import collections
import json
import math
import os
import platform
import random
import resource
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BASE = REPO / "tests" / "golden" / "trace-v1-demo-numpy.json"
#: Largest mutant text a huge_array mutation makes (bytes).
MAX_TEXT = 24 * 2**20
#: Worker address-space limit (bytes): a runaway allocation fails instead of eating the host.
MEMORY_LIMIT = 6 * 2**30
#: Longest acceptable error message (characters).
MAX_MESSAGE = 600
PH = "\u0000tracekit-fuzz-raw\u0000"  # placeholder string swapped for a raw JSON token

Path_ = tuple[Any, ...]


@dataclass
class Mutant:
    index: int
    category: str
    what: str  # the mutation in words
    data: bytes = field(repr=False)
    path: Path_ | None = None  # where in the trace, when the mutation has one place


# -- helpers over the parsed trace -------------------------------------------------------------
def _get(obj: Any, path: Path_) -> Any:
    for k in path:
        obj = obj[k]
    return obj


def _set(obj: Any, path: Path_, value: Any) -> None:
    _get(obj, path[:-1])[path[-1]] = value


def _jpath(path: Path_) -> str:
    return "$" + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path)


def _walk(rng: random.Random, obj: Any, want: Callable[[Any], bool] | None = None) -> Path_:
    """A random path from the root: at each level stop with probability 0.25 (never at the
    root), else step into a random child; ``want`` restricts where it may stop."""
    for _ in range(100):
        path: list[Any] = []
        cur = obj
        while True:
            kids = list(cur) if isinstance(cur, dict) else list(range(len(cur))) if isinstance(
                cur, list) else []  # fmt: skip
            stop_ok = path and (want is None or want(cur))
            if not kids or (stop_ok and rng.random() < 0.25):
                break
            k = rng.choice(kids)
            path.append(k)
            cur = cur[k]
        if path and (want is None or want(cur)):
            return tuple(path)
    raise RuntimeError("no path found")


def _records_with(obj: Any, key: str) -> list[Path_]:
    out = []
    for j, s in enumerate(obj["steps"]):
        for i, r in enumerate(s["nodes"]):
            st = r.get("stats")
            if isinstance(st, dict) and st.get(key) is not None:
                out.append(("steps", j, "nodes", i, "stats", key))
    return out


def _dump(obj: Any, raw: dict[str, str] | None = None) -> bytes:
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=True)
    for ph, token in (raw or {}).items():
        text = text.replace(json.dumps(ph, ensure_ascii=False), token, 1)
    return text.encode("utf-8", errors="surrogatepass")


def _raw(token: str, n: int = 0) -> tuple[str, dict[str, str]]:
    ph = f"{PH}{n}"
    return ph, {ph: token}


# -- the mutations -----------------------------------------------------------------------------
def m_truncate(rng: random.Random, obj: Any, data: bytes) -> Mutant:
    n = len(data)
    cut = rng.randrange(max(0, n - 64), n) if rng.random() < 0.2 else rng.randrange(0, n)
    return Mutant(0, "", f"cut at byte {cut} of {n}", data[:cut])


def m_byte_flip(rng: random.Random, obj: Any, data: bytes) -> Mutant:
    b = bytearray(data)
    where = sorted(rng.randrange(len(b)) for _ in range(rng.randint(1, 8)))
    for at in where:
        b[at] = rng.randrange(256)
    return Mutant(0, "", f"bytes at {where} overwritten", bytes(b))


_VALUES: list[Any] = ["x", "", 0, 7, -1, 1.5, True, False, None, [], {}, [1, 2], {"a": 1}]


def _type(v: Any) -> str:
    return "bool" if isinstance(v, bool) else "num" if isinstance(v, (int, float)) else type(
        v).__name__  # fmt: skip


def m_wrong_type(rng: random.Random, obj: Any, data: bytes) -> Mutant:
    path = _walk(rng, obj)
    old = _get(obj, path)
    new = rng.choice([v for v in _VALUES if _type(v) != _type(old)])
    _set(obj, path, new)
    return Mutant(0, "", f"{_jpath(path)}: {_type(old)} -> {json.dumps(new)}", _dump(obj), path)


def m_missing_key(rng: random.Random, obj: Any, data: bytes) -> Mutant:
    if rng.random() < 0.3:  # a top-level key (the walk rarely stops at the root's children)
        path: Path_ = ()
    else:
        path = _walk(rng, obj, lambda v: isinstance(v, dict) and bool(v))
    d = _get(obj, path)
    key = rng.choice(list(d))
    del d[key]
    return Mutant(0, "", f"{_jpath((*path, key))} deleted", _dump(obj), (*path, key))


def m_huge_array(rng: random.Random, obj: Any, data: bytes) -> Mutant:
    path = _walk(rng, obj)
    old = _get(obj, path)
    elem = old[0] if isinstance(old, list) and old else rng.choice([0, 1.5, "x", None, old])
    size = max(1, len(json.dumps(elem)) + 1)
    n = min(rng.choice([10**4, 10**5, 10**6]), MAX_TEXT // size)
    _set(obj, path, [elem] * n)
    what = f"{_jpath(path)}: array of {n} x {json.dumps(elem)[:40]}"
    return Mutant(0, "", what, _dump(obj), path)


_NUMBERS = ["1e308", "-1e308", "1e400", "-1e400", "1" + "0" * 400, "-" + "9" * 400,
            "18446744073709551616", "-9223372036854775809", "-0.0", "1e-400", "0", "-0"]  # fmt: skip


def _number_path(rng: random.Random, obj: Any) -> Path_:
    return _walk(rng, obj, lambda v: isinstance(v, (int, float)) and not isinstance(v, bool))


def m_huge_number(rng: random.Random, obj: Any, data: bytes) -> Mutant:
    path = _number_path(rng, obj)
    token = rng.choice(_NUMBERS)
    ph, raw = _raw(token)
    _set(obj, path, ph)
    return Mutant(0, "", f"{_jpath(path)} = {token[:30]}", _dump(obj, raw), path)


_VERSIONS: list[Any] = [3, 4, 1000, 2**31, 10**30, 1.0, 1.5, "1", "2", True, None, 0, -1, [], {}]
_FORMATS: list[Any] = ["tracekit-trace-v2", "", None, "chrome-trace", 1, ["tracekit-trace"]]


def m_newer_version(rng: random.Random, obj: Any, data: bytes) -> Mutant:
    r = rng.random()
    if r < 0.1:
        del obj["version"]
        return Mutant(0, "", "$.version deleted", _dump(obj), ("version",))
    if r < 0.25:
        obj["format"] = rng.choice(_FORMATS)
        return Mutant(0, "", f"$.format = {json.dumps(obj['format'])}", _dump(obj), ("format",))
    if r < 0.35:  # a newer version with the rest changed too, as a v3 might
        obj["version"] = rng.choice([3, 4])
        obj["steps"] = {"v3": obj["steps"]}
        return Mutant(0, "", "$.version = 3 and $.steps reshaped", _dump(obj), ("version",))
    obj["version"] = rng.choice(_VERSIONS)
    return Mutant(0, "", f"$.version = {json.dumps(obj['version'])}", _dump(obj), ("version",))


def m_bad_base64(rng: random.Random, obj: Any, data: bytes) -> Mutant:
    paths = _records_with(obj, "heatmap")
    if not paths:  # a timing-capture base has no statistics: base64 where numbers belong
        j = rng.randrange(len(obj["steps"]))
        obj["steps"][j]["logits"]["hist"]["counts"] = base64.b64encode(rng.randbytes(8)).decode()
        path = ("steps", j, "logits", "hist")
        return Mutant(0, "", f"{_jpath(path)}.counts = base64 text (no heatmap in the base)",
                      _dump(obj), path)  # fmt: skip
    hm_path = rng.choice(paths)
    hm = _get(obj, hm_path)
    n = hm["rows"] * hm["cols"]
    choice = rng.randrange(10)
    if choice < 6:
        codes = [
            "!!!!",
            "A",
            "AB=",
            "====",
            "",
            base64.b64encode(rng.randbytes(rng.choice([1, n - 1, n + 1, 2 * n, 3]))).decode(),
        ][choice]
        hm["codes"] = codes
        what = f"codes = {codes[:24]!r}"
    elif choice == 6:
        hm["codes"] = "ÿÿÿÿ" if rng.random() < 0.5 else "AAAA\nAAAA"
        what = f"codes = {hm['codes']!r}"
    elif choice == 7:
        hm["codes"] = "A" * rng.choice([10**5, 4 * 10**6])
        what = f"codes of {len(hm['codes'])} characters"
    elif choice == 8:
        key = rng.choice(["rows", "cols"])
        hm[key] = rng.choice([0, 1, hm[key] + 1, 32 if key == "rows" else 64, hm[key] // 2])
        what = f"{key} = {hm[key]} (codes unchanged)"
    else:
        hm["lo"], hm["hi"] = hm["hi"], hm["lo"] - rng.choice([0, 1e30])
        what = "lo/hi swapped"
    return Mutant(0, "", f"{_jpath(hm_path)}: {what}", _dump(obj), hm_path)


_LITERALS = ["NaN", "Infinity", "-Infinity", "nan", "inf", "1e999", "-1e999", "NaN1", "+1"]


def m_nan_literal(rng: random.Random, obj: Any, data: bytes) -> Mutant:
    path = _number_path(rng, obj)
    token = rng.choice(_LITERALS)
    ph, raw = _raw(token)
    _set(obj, path, ph)
    return Mutant(0, "", f"{_jpath(path)} = {token}", _dump(obj, raw), path)


def m_deep_nesting(rng: random.Random, obj: Any, data: bytes) -> Mutant:
    depth = rng.choice([10, 100, 500, 900, 960, 990, 999, 1000, 2000, 5000, 100_000])
    kind = rng.choice(["array", "object"])
    op, close = ("[", "]") if kind == "array" else ('{"a":', "}")
    unterminated = rng.random() < 0.2
    token = op * depth + ("" if unterminated else "1" + close * depth)
    if rng.random() < 0.3:
        path: Path_ = ("deep_extra",)  # an extra key: readers ignore it, the parser does not
        obj["deep_extra"] = None
    else:
        path = _walk(rng, obj)
    ph, raw = _raw(token)
    _set(obj, path, ph)
    what = f"{_jpath(path)}: {depth} nested {kind}s" + (" (unterminated)" if unterminated else "")
    return Mutant(0, "", what, _dump(obj, raw), path)


_BAD_BYTES = [b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xc0\xaf", b"\x80", b"\xf8\x88"]


def m_non_utf8(rng: random.Random, obj: Any, data: bytes) -> Mutant:
    r = rng.random()
    if r < 0.1:
        enc = rng.choice(["utf-16", "utf-16-le", "utf-32"])
        return Mutant(0, "", f"re-encoded as {enc}", data.decode("utf-8").encode(enc))
    if r < 0.2:
        path = _walk(rng, obj, lambda v: isinstance(v, str))
        _set(obj, path, "grüße µs")
        text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
        data = text.encode("latin-1", errors="replace")  # "−" and "×" become "?"
        return Mutant(0, "", f"{_jpath(path)}: Latin-1 file", data, path)
    if r < 0.3:
        return Mutant(0, "", "UTF-8 BOM prepended", b"\xef\xbb\xbf" + data)
    bad = rng.choice(_BAD_BYTES)
    at = rng.randrange(len(data))
    return Mutant(0, "", f"{bad!r} inserted at byte {at}", data[:at] + bad + data[at:])


_STRINGS = ["\ud800", "a\udc80b", "\u0000\u0000", "\x1b[31mred", "<script>alert(1)</script>",
            "../../../../etc/passwd", "/etc/passwd", "{{7*7}}", "%s%n%x", "\u202etxt.exe",
            "x" * 10**6, "😀" * 1000]  # fmt: skip


def m_string_junk(rng: random.Random, obj: Any, data: bytes) -> Mutant:
    path = _walk(rng, obj, lambda v: isinstance(v, str))
    new = rng.choice(_STRINGS)
    _set(obj, path, new)
    return Mutant(0, "", f"{_jpath(path)} = {new[:30]!r}", _dump(obj), path)


def m_references(rng: random.Random, obj: Any, data: bytes) -> Mutant:
    nodes, steps = obj["nodes"], obj["steps"]
    j = rng.randrange(len(steps))
    i = rng.randrange(len(nodes))
    k = rng.randrange(len(nodes))
    c = rng.randrange(14)
    path: Path_ = ("steps", j, "nodes", i)
    if c == 0:
        nodes[i]["id"], nodes[k]["id"] = nodes[k]["id"], nodes[i]["id"]
        what, path = f"node ids {i} and {k} swapped", ("nodes", i, "id")
    elif c == 1:
        steps[j]["index"] = rng.choice([j + 1, -1, 10**9])
        what, path = f"step {j} index = {steps[j]['index']}", ("steps", j, "index")
    elif c == 2:
        steps[j]["name"] = rng.choice(["decode 0", "prefill", f"decode {j + 5}", "x/y"])
        what, path = f"step {j} name = {steps[j]['name']!r}", ("steps", j, "name")
    elif c == 3:
        nodes[i]["name"] = nodes[k]["name"]
        what, path = f"node {i} renamed to node {k}'s name", ("nodes", i, "name")
    elif c == 4:
        del steps[j]["nodes"][i]
        what = f"record {i} of step {j} deleted"
    elif c == 5:
        steps[j]["nodes"].append(steps[j]["nodes"][i])
        what = f"record {i} of step {j} appended again"
    elif c == 6:
        steps[j]["nodes"][i]["id"] = rng.choice([k, -1, 10**9, len(nodes)])
        what = f"record {i} of step {j}: id = {steps[j]['nodes'][i]['id']}"
    elif c == 7:
        nodes[i]["inputs"] = rng.choice([["no-such-node"], [nodes[i]["name"]], ["weight:"], []])
        what, path = f"node {i} inputs = {nodes[i]['inputs']}", ("nodes", i, "inputs")
    elif c == 8:
        nodes[i]["layer"] = rng.choice([-1, 10**6, 3.5])
        what, path = f"node {i} layer = {nodes[i]['layer']}", ("nodes", i, "layer")
    elif c == 9:
        del nodes[i]
        what, path = f"topology node {i} deleted", ("nodes", i)
    elif c == 10:
        steps.append(steps[j])
        what, path = f"step {j} appended again", ("steps", len(steps) - 1)
    elif c == 11:
        steps[j]["nodes"][i]["shape"] = rng.choice([[-1, 5], [10**12, 10**12], [], [0]])
        what = f"record {i} of step {j}: shape = {steps[j]['nodes'][i]['shape']}"
    elif c == 12:
        obj["steps"] = []
        what, path = "no steps", ("steps",)
    else:
        obj["nodes"], obj["steps"] = [], [dict(s, nodes=[]) for s in steps]
        what, path = "no nodes", ("nodes",)
    return Mutant(0, "", what, _dump(obj), path)


def m_value_range(rng: random.Random, obj: Any, data: bytes) -> Mutant:
    steps = obj["steps"]
    j = rng.randrange(len(steps))
    recs = steps[j]["nodes"]
    i = rng.randrange(len(recs))
    r = recs[i]
    c = rng.randrange(12)
    path: Path_ = ("steps", j, "nodes", i)
    lg = steps[j]["logits"]
    if c == 0 and r["stats"]:
        key = rng.choice(["nan", "pos_inf", "neg_inf", "zeros", "count"])
        r["stats"][key] = rng.choice([-1, 10**18, 10**30])
        what = f"stats.{key} = {r['stats'][key]}"
    elif c == 1:
        key = rng.choice(["time_s", "host_s", "full_time_s", "capture_cost"])
        r[key] = rng.choice([-1.0, 0.0, 1e300, -1e-300])
        what = f"{key} = {r[key]}"
    elif c == 2:
        lg["top_k"][0]["prob"] = rng.choice([-0.5, 2.0, 1e300])
        what, path = f"top_k[0].prob = {lg['top_k'][0]['prob']}", ("steps", j, "logits")
    elif c == 3:
        lg["chosen"]["id"] = rng.choice([-1, 10**9, 2**63])
        what, path = f"chosen.id = {lg['chosen']['id']}", ("steps", j, "logits")
    elif c == 4 and "perf" in r:  # v1: a stored verdict
        r["perf"]["bound"] = rng.choice(["warp", "", "LAUNCH"])
        what = f"perf.bound = {r['perf']['bound']!r}"
    elif c == 4 and isinstance(r.get("start_ns"), int):  # v2: verdicts derived, times stamped
        r["end_ns"] = r["start_ns"] - rng.choice([1, 10**9])
        what = f"end_ns = {r['end_ns']} before start_ns {r['start_ns']}"
    elif c == 4 and r["launches"]:
        r["launches"][0]["bytes_read"] = rng.choice([-1, 2**70])
        what = f"launches[0].bytes_read = {r['launches'][0]['bytes_read']}"
    elif c == 5 and r["launches"]:
        ln = r["launches"][0]
        key = rng.choice(["grid", "block"])
        ln[key] = rng.choice([[0, 0, 0], [-1, 1, 1], [2**40, 1, 1], [1]])
        what = f"launches[0].{key} = {ln[key]}"
    elif c == 6:
        steps[j]["entropy"] = -1.0
        lg["entropy"] = rng.choice([-1.0, 1e300])
        what, path = f"logits.entropy = {lg['entropy']}", ("steps", j, "logits")
    elif c == 7:
        obj["ceilings"][rng.choice(["copy_bandwidth_Bps", "peak_flops", "launch_overhead_s"])] = (
            rng.choice([0, -1.0, 1e-300])
        )
        what, path = "a ceiling = 0 or negative", ("ceilings",)
    elif c == 8 and r["stats"]:
        h = r["stats"]["hist"]
        h["counts"] = h["counts"][: rng.choice([0, 1, len(h["counts"]) - 1])]
        what = f"stats.hist: {len(h['counts'])} counts"
    elif c == 9:
        steps[j]["n_tokens"] = rng.choice([0, -1, 10**9])
        what, path = f"n_tokens = {steps[j]['n_tokens']}", ("steps", j)
    elif c == 10:
        obj["run"]["generated_tokens"] = [-5, 10**12]
        what, path = "run.generated_tokens out of the vocabulary", ("run",)
    else:
        obj["model"]["n_layer"] = rng.choice([0, -3, 10**9])
        what, path = f"model.n_layer = {obj['model']['n_layer']}", ("model",)
    return Mutant(0, "", f"step {j} record {i}: {what}", _dump(obj), path)


CATEGORIES: dict[str, Callable[[random.Random, Any, bytes], Mutant]] = {
    "truncate": m_truncate,
    "byte_flip": m_byte_flip,
    "wrong_type": m_wrong_type,
    "missing_key": m_missing_key,
    "huge_array": m_huge_array,
    "huge_number": m_huge_number,
    "newer_version": m_newer_version,
    "bad_base64": m_bad_base64,
    "nan_literal": m_nan_literal,
    "deep_nesting": m_deep_nesting,
    "non_utf8": m_non_utf8,
    "string_junk": m_string_junk,
    "references": m_references,
    "value_range": m_value_range,
}


def mutant(index: int, seed: int, base: bytes) -> Mutant:
    """Mutant ``index`` of ``seed`` (deterministic)."""
    names = list(CATEGORIES)
    category = names[index % len(names)]
    rng = random.Random(f"{seed}:{index}")
    obj = json.loads(base)
    m = CATEGORIES[category](rng, obj, base)
    m.index, m.category = index, category
    return m


# -- judging one mutant ------------------------------------------------------------------------
def _dash_request(client: Any, app: Any, output: str, inputs: list[tuple[str, str, Any]]) -> Any:
    """What the browser POSTs to /_dash-update-component for the server callback ``output``."""
    spec = app.callback_map[output]
    outs = [{"id": o.split(".")[0], "property": o.split(".")[1]}
            for o in output.strip(".").split("...")]  # fmt: skip
    state = {"node": 0, "step": 0}
    body = {
        "output": output,
        "outputs": outs if output.startswith("..") else outs[0],
        "inputs": [{"id": i, "property": p, "value": v} for i, p, v in inputs],
        "changedPropIds": [f"{i}.{p}" for i, p, _ in inputs],
        "state": [
            {"id": s["id"], "property": s["property"], "value": state.get(s["id"])}
            for s in spec.get("state", [])
        ],  # fmt: skip
    }
    return client.post("/_dash-update-component", json=body)


def _strings(obj: Any) -> Iterator[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)


def dashboard_check(path: Path, trace: Any, message: str | None, m: Mutant) -> tuple[str, str]:
    """("", "") when the dashboard holds up for this file, else (verdict, detail)."""
    from tracekit.viz.app import create_app
    from tracekit.viz.data import MEASURES

    try:
        app = create_app([path])
    except Exception as e:
        return "dashboard-error", f"create_app: {type(e).__name__}: {str(e)[:300]}"
    app.server.config["PROPAGATE_EXCEPTIONS"] = True
    client = app.server.test_client()
    try:
        for url in ("/", "/_dash-layout"):
            r = client.get(url)
            if r.status_code != 200:
                return "dashboard-error", f"GET {url}: HTTP {r.status_code}"
        layout = r.get_json()
        error_page = getattr(app.layout, "id", None) == "load-error"
        if message is not None or error_page:
            text = " ".join(_strings(layout))
            want = message[len(str(path)) + 2 :] if message else ""
            if not error_page or str(path) not in text or want not in text:
                return "dashboard-message", f"the page does not say {str(path)!r}: {want!r}"
            return "", ""
        # accepted: every server view of the mutated step and node answers
        n_steps, n_nodes = len(trace["steps"]), len(trace["nodes"])
        where = m.path or ()
        js = [where[1]] if len(where) > 1 and where[0] == "steps" and isinstance(where[1], int) \
            else list(range(n_steps))  # fmt: skip
        js = [j for j in js if j < n_steps] or list(range(n_steps))
        node = next(s for s in app.layout._traverse() if getattr(s, "id", None) == "node").data
        nodes = [node]
        if len(where) > 3 and where[2] == "nodes" and isinstance(where[3], int):
            nodes.append(where[3])
        if len(where) > 1 and where[0] == "nodes" and isinstance(where[1], int):
            nodes.append(where[1])
        nodes = [i for i in dict.fromkeys(nodes) if 0 <= i < n_nodes]
        out = {k.split("@")[0].strip(".").split(".")[0]: k for k in app.callback_map}
        for j in js:
            calls: list[tuple[str, list[tuple[str, str, Any]]]] = [
                (out["graph"], [("graph-key", "data", [j, ms])]) for ms in MEASURES
            ]
            calls.append((out["topk"], [("tokens-key", "data", [j])]))
            for i in nodes:
                calls += [
                    (out["detail-head"], [("step", "value", j), ("node", "data", i)]),
                    (out["timeline"], [("timeline-key", "data", [j, i])]),
                    (out["roofline"], [("roofline-key", "data", [j, i])]),
                ]
            sel = next(k for k in app.callback_map if k.startswith("graph.figure@"))
            calls += [(sel, [("graph-sel-key", "data", [i])]) for i in nodes]
            for output, inputs in calls:
                r = _dash_request(client, app, output, inputs)
                if r.status_code not in (200, 204):
                    return "dashboard-error", f"{output} {inputs}: HTTP {r.status_code}"
    except Exception as e:
        tb = traceback.extract_tb(e.__traceback__)[-1]
        at = f"{Path(tb.filename).name}:{tb.lineno}"
        return "dashboard-error", f"{type(e).__name__} at {at}: {str(e)[:300]}"
    return "", ""


def _non_finite(obj: Any, path: str = "$") -> str | None:
    """JSON path and value of the first NaN/Inf float in a loaded trace."""
    stack = [(obj, path)]
    while stack:
        o, p = stack.pop()
        if isinstance(o, float) and not math.isfinite(o):
            return f"{p} = {o}"
        if isinstance(o, dict):
            stack.extend((v, f"{p}.{k}") for k, v in o.items())
        elif isinstance(o, list):
            stack.extend((v, f"{p}[{i}]") for i, v in enumerate(o))
    return None


def judge(
    m: Mutant, workdir: Path, dash_rejected: bool, dash_accepted: bool = True
) -> dict[str, Any]:
    """Write mutant ``m`` and run it through load_trace, then the dashboard when asked (for a
    rejected file: ``dash_rejected``; for an accepted one: ``dash_accepted``)."""
    from tracekit.trace.format import TraceError, load_trace

    path = workdir / f"mutant-{m.index}.json"
    path.write_bytes(m.data)
    res: dict[str, Any] = {"index": m.index, "category": m.category, "what": m.what[:200],
                           "bytes": len(m.data)}  # fmt: skip
    t0 = time.perf_counter()
    trace, message = None, None
    try:
        trace = load_trace(path)
        res["verdict"] = "accepted"
        where = _non_finite(trace)
        if where is not None:  # e.g. 1e400 parses to inf: a NaN/Inf the file spelt as a number
            res["verdict"], res["detail"] = "non-finite-accepted", f"load_trace kept {where}"
    except TraceError as e:
        message = str(e)
        res["message"] = message.replace(str(path), "MUTANT")[: MAX_MESSAGE + 100]
        ok = (
            message.startswith(f"{path}: ")
            and len(message) > len(str(path)) + 2
            and "\n" not in message
            and len(message) <= MAX_MESSAGE
        )
        res["verdict"] = "rejected" if ok else "unclear-message"
    except BaseException as e:  # noqa: BLE001 - any other type is the finding
        tb = traceback.extract_tb(e.__traceback__)[-1]
        res["verdict"] = "wrong-exception"
        res["message"] = f"{type(e).__name__} at {Path(tb.filename).name}:{tb.lineno}: {e}"[:500]
    res["load_s"] = round(time.perf_counter() - t0, 4)
    v = res["verdict"]
    if (v == "accepted" and dash_accepted) or (v == "rejected" and dash_rejected):
        res["dashboard"] = True
        verdict, detail = dashboard_check(path, trace, message, m)
        if verdict:
            res["verdict"], res["detail"] = verdict, detail
    path.unlink()
    return res


# -- workers -----------------------------------------------------------------------------------
def worker_main(base: Path, seed: int, workdir: Path, dash_every: int) -> int:
    """--worker: read mutant indices on stdin, answer one JSON line each on the real stdout."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything the code under test prints goes to stderr
    sys.stdout = sys.stderr
    import logging

    logging.disable(logging.CRITICAL)  # Flask logs each exception it propagates
    data = base.read_bytes()
    workdir.mkdir(parents=True, exist_ok=True)
    import tracekit.trace.format  # noqa: F401 - imported before the first timed case
    import tracekit.viz.app  # noqa: F401

    proto.write("ready\n")
    proto.flush()
    for line in sys.stdin:
        i = int(line)
        m = mutant(i, seed, data)
        res = judge(m, workdir, dash_every > 0 and i % dash_every == 0, dash_every > 0)
        proto.write(json.dumps(res) + "\n")
        proto.flush()
    return 0


class Worker:
    def __init__(self, args: list[str], log: Path) -> None:
        self.args = args
        self.log = log
        self.case: int | None = None
        self.deadline = 0.0
        self.start()

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "w") as err:  # the worker's stderr: the traceback of a crash
            self.proc = subprocess.Popen(
                self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                text=True, bufsize=1,
            )  # fmt: skip
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("a fuzz worker failed to start")

    def send(self, i: int, timeout: float) -> None:
        assert self.proc.stdin is not None
        self.case, self.deadline = i, time.monotonic() + timeout
        self.proc.stdin.write(f"{i}\n")
        self.proc.stdin.flush()

    def stderr_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-600:]
        except OSError:
            return ""

    def restart(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.case = None
        self.start()

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def run(
    indices: list[int],
    seed: int = 0,
    jobs: int = 2,
    timeout: float = 60.0,
    dash_every: int = 10,
    base: Path = BASE,
    workdir: Path | None = None,
    log: Callable[[str], Any] | None = print,
) -> list[dict[str, Any]]:
    """Judge ``indices`` in ``jobs`` worker processes; one result dict per mutant, in order.

    ``dash_every``: every n-th rejected mutant (index % n == 0) and every accepted one get
    the dashboard check (0: none).
    """
    own = workdir is None
    wd = Path(tempfile.mkdtemp(prefix="fuzz-traces-")) if own else Path(workdir)  # type: ignore[arg-type]
    pending = list(reversed(indices))
    results: dict[int, dict[str, Any]] = {}
    sel = selectors.DefaultSelector()
    workers = []
    for w in range(max(1, jobs)):
        args = [sys.executable, str(Path(__file__).resolve()), "--worker", "--base", str(base),
                "--seed", str(seed), "--workdir", str(wd / f"w{w}"),
                "--dashboard-every", str(dash_every)]  # fmt: skip
        workers.append(Worker(args, wd / f"w{w}.stderr"))
    t0 = time.monotonic()
    try:
        while pending or any(w.case is not None for w in workers):
            for w in workers:
                if w.case is None and pending:
                    w.send(pending.pop(), timeout)
                    sel.register(w.proc.stdout, selectors.EVENT_READ, w)  # type: ignore[arg-type]
            busy = [w for w in workers if w.case is not None]
            wait = max(0.0, min(w.deadline for w in busy) - time.monotonic())
            for key, _ in sel.select(timeout=wait):
                w = key.data
                line = w.proc.stdout.readline()
                sel.unregister(w.proc.stdout)
                if line:
                    res = json.loads(line)
                else:
                    res = {"index": w.case, "verdict": "crash",
                           "message": f"worker died (exit {w.proc.wait()}): {w.stderr_tail()}"}  # fmt: skip
                    w.restart()
                results[res["index"]] = res
                w.case = None
                if log and len(results) % 500 == 0:
                    log(f"{len(results)}/{len(indices)} in {time.monotonic() - t0:.0f} s")
            now = time.monotonic()
            for w in workers:
                if w.case is not None and now > w.deadline:
                    sel.unregister(w.proc.stdout)
                    results[w.case] = {"index": w.case, "verdict": "hang",
                                       "message": f"no answer in {timeout} s"}  # fmt: skip
                    w.restart()
    finally:
        for w in workers:
            w.close()
        if own:
            shutil.rmtree(wd, ignore_errors=True)
    for i in indices:  # category of hangs and crashes, for the report
        r = results[i]
        r.setdefault("category", list(CATEGORIES)[i % len(CATEGORIES)])
    return [results[i] for i in indices]


OK = ("rejected", "accepted")


def report(
    results: list[dict[str, Any]], seed: int, seconds: float, base: Path = BASE
) -> dict[str, Any]:
    by_cat: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for r in results:
        by_cat[r["category"]][r["verdict"]] += 1
    verdicts = collections.Counter(r["verdict"] for r in results)
    dash = [r for r in results if r.get("dashboard")]
    slowest = max(results, key=lambda r: r.get("load_s", 0.0))
    return {
        "base": str(base.relative_to(REPO)) if base.is_relative_to(REPO) else str(base),
        "seed": seed,
        "count": len(results),
        "seconds": round(seconds, 1),
        "python": platform.python_version(),
        "verdicts": dict(verdicts),
        "by_category": {c: dict(v) for c, v in by_cat.items()},
        "dashboard_checked": len(dash),
        "dashboard_checked_rejected": sum(1 for r in dash if "message" in r),
        "dashboard_checked_accepted": sum(1 for r in dash if "message" not in r),
        "slowest_load_s": slowest.get("load_s"),
        "slowest_loads": [
            {k: r.get(k) for k in ("index", "category", "what", "bytes", "load_s", "verdict")}
            for r in sorted(results, key=lambda r: -r.get("load_s", 0.0))[:5]
        ],
        "failures": [r for r in results if r["verdict"] not in OK],
        "message_samples": _samples(results),
    }


def _samples(results: list[dict[str, Any]]) -> dict[str, str]:
    """The first rejection message of each category (what a user reads)."""
    out: dict[str, str] = {}
    for r in results:
        if r["verdict"] == "rejected" and r["category"] not in out:
            out[r["category"]] = r["message"]
    return out


def summary(rep: dict[str, Any]) -> str:
    lines = [f"{rep['count']} mutants of {rep['base']} (seed {rep['seed']}) in {rep['seconds']} s"]
    lines.append("verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(rep["verdicts"].items())))
    lines.append(
        f"dashboard checked: {rep['dashboard_checked']} ({rep['dashboard_checked_rejected']} "
        f"rejected files, {rep['dashboard_checked_accepted']} accepted)"
    )
    for c, v in rep["by_category"].items():
        lines.append(f"  {c:14s} " + ", ".join(f"{k} {n}" for k, n in sorted(v.items())))
    lines.append(f"failures: {len(rep['failures'])}")
    for f in rep["failures"][:30]:
        lines.append(f"  #{f['index']} {f['category']} [{f.get('what', '')}]: {f['verdict']}: "
                     f"{f.get('detail') or f.get('message', '')}"[:400])  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=7000)
    p.add_argument("--start", type=int, default=0, help="first mutant index")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per mutant")
    p.add_argument("--dashboard-every", type=int, default=10,
                   help="dashboard check of every n-th rejected mutant (and every accepted one)")  # fmt: skip
    p.add_argument("--base", type=Path, default=BASE)
    p.add_argument("--json", type=Path, help="write the report here")
    p.add_argument("--only", type=int, help="judge one mutant in this process and print it")
    p.add_argument("--keep", type=Path, help="with --only: keep the mutant file in this folder")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        return worker_main(a.base, a.seed, a.workdir, a.dashboard_every)
    if a.only is not None:
        m = mutant(a.only, a.seed, a.base.read_bytes())
        folder = a.keep or Path(tempfile.mkdtemp(prefix="fuzz-trace-"))
        folder.mkdir(parents=True, exist_ok=True)
        res = judge(m, folder, dash_rejected=True)
        if a.keep:
            (folder / f"mutant-{m.index}.json").write_bytes(m.data)
        print(json.dumps(res, indent=1))
        return 0 if res["verdict"] in OK else 1
    t0 = time.monotonic()
    indices = list(range(a.start, a.start + a.count))
    results = run(indices, a.seed, a.jobs, a.timeout, a.dashboard_every, a.base)
    rep = report(results, a.seed, time.monotonic() - t0, a.base)
    print(summary(rep))
    if a.json:
        a.json.write_text(json.dumps(rep, indent=1))
    return 1 if rep["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
