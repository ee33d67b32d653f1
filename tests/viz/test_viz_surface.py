"""The dashboard's attack surface (issue 6): it binds 127.0.0.1 unless told otherwise, no request
reads a file that was not given on the command line, and trace content is never unpickled,
evaluated or executed.

The live tests start the real server (``python -m tracekit viz GIVEN.json --port P``, default
host) in a subprocess whose working folder also holds a secret file, a second trace that was
NOT given, and whose environment holds a canary (so ``/proc/self/environ`` would show it). Raw
requests (``http.client``: no client-side normalisation of ``..`` or of escapes) try path
traversal in every form against every route Dash serves, and the callback endpoint gets
payloads whose values are paths. No response may contain any of the markers; positive controls
show that a marker in served content would be seen.
"""

from __future__ import annotations

import ast
import http.client
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "trace-v1-demo-numpy.json"
PKG = REPO / "tracekit"


@dataclass
class Server:
    port: int
    proc: subprocess.Popen[str]
    root: Path
    given: Path
    secrets: dict[str, bytes]  # what the marker stands for -> bytes that must never be served

    def request(self, method: str, target: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, bytes]:  # fmt: skip
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.putrequest(method, target, skip_accept_encoding=True)
            for k, v in (headers or {}).items():
                conn.putheader(k, v)
            if body is not None:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            r = conn.getresponse()
            return r.status, r.read(64 * 2**20)
        finally:
            conn.close()

    def leaks(self, body: bytes) -> list[str]:
        """Names of the markers found in ``body`` (raw, or with JSON's \\u escapes undone)."""
        texts = [body]
        try:
            texts.append(json.dumps(json.loads(body), ensure_ascii=False).encode())
        except ValueError:
            pass
        return [k for k, m in self.secrets.items() if any(m in t for t in texts)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("surface")
    traces = root / "traces"
    traces.mkdir()
    marks = {k: secrets.token_hex(16) for k in ("secret", "beside", "other_trace", "environ")}
    (root / "secret.txt").write_text(f"top secret {marks['secret']}\n")
    (traces / "secret.txt").write_text(f"beside the trace {marks['beside']}\n")
    given = traces / "given.json"
    shutil.copyfile(GOLDEN, given)
    other = json.loads(GOLDEN.read_text())
    other["model"]["name"] = f"not given {marks['other_trace']}"
    (traces / "other.json").write_text(json.dumps(other))
    leak: dict[str, bytes] = {k: v.encode() for k, v in marks.items()}
    leak["pyproject.toml"] = b"setuptools.build_meta"
    leak["tracekit/viz/app.py"] = b"def _register("
    if Path("/etc/passwd").is_file() and b"root:" in Path("/etc/passwd").read_bytes():
        leak["/etc/passwd"] = b"root:x:0:0"
    port = _free_port()
    env = {**os.environ, "TK_SURFACE_CANARY": marks["environ"]}
    env.pop("TRACEKIT_DEBUG", None)
    log = open(root / "server.log", "w")  # a file, not a pipe: a full pipe would block it
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracekit", "viz", "given.json", "--port", str(port)],
        cwd=traces, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    srv = Server(port, proc, root, given, leak)
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"tracekit viz exited: {(root / 'server.log').read_text()[-2000:]}")
        try:
            if srv.request("GET", "/")[0] == 200:
                break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.2)
    yield srv
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


# -- where it listens --------------------------------------------------------------------------
def _listening(port: int) -> list[str]:
    """Local addresses of the LISTEN sockets on ``port`` (from /proc/net/tcp and tcp6)."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            addr, p = local.split(":")
            if state == "0A" and int(p, 16) == port:
                out.append(addr)
    return out


def test_binds_loopback_only_by_default(server: Server) -> None:
    if not Path("/proc/net/tcp").exists():
        pytest.skip("no /proc/net/tcp here")
    # 0100007F is 127.0.0.1 (little-endian hex); 0.0.0.0 would be 00000000, :: all zeros
    assert _listening(server.port) == ["0100007F"]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET: no packet is sent, it picks a route
            ip = s.getsockname()[0]
        except OSError:
            ip = "127.0.0.1"
    if not ip.startswith("127."):
        with pytest.raises(OSError), socket.create_connection((ip, server.port), timeout=3):
            pass


def test_viz_cli_defaults_to_loopback_and_warns_otherwise(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import dash

    from tracekit.viz import app as viz_app

    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(dash.Dash, "run", lambda self, **kw: seen.append(kw))
    assert viz_app.viz_main([str(GOLDEN), "--port", "8123"]) == 0
    assert seen[-1]["host"] == "127.0.0.1" and seen[-1]["debug"] is False
    assert "other machines" not in capsys.readouterr().err
    assert viz_app.viz_main([str(GOLDEN), "--host", "0.0.0.0"]) == 0
    assert seen[-1]["host"] == "0.0.0.0"
    assert "other machines can read these traces" in capsys.readouterr().err


# -- what it serves ----------------------------------------------------------------------------
def test_positive_controls(server: Server) -> None:
    """Served content is seen: the given trace's model name in the layout, the asset's code,
    and a marker planted in a response would be found."""
    status, body = server.request("GET", "/_dash-layout")
    assert status == 200 and b"tracekit demo" in body and b"given.json" in body
    status, body = server.request("GET", "/assets/tracekit.js")
    assert status == 200 and b"dash_clientside" in body
    assert server.leaks(b'{"a": "\\u0074op ' + server.secrets["secret"] + b'"}') == ["secret"]


def _targets(server: Server) -> list[str]:
    secret = str(server.root / "secret.txt")
    q = urllib.parse.quote
    up = "../" * 12
    enc = "..%2f" * 12
    targets = [
        "/../../etc/passwd", "/..%2f..%2f..%2fetc%2fpasswd", "/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/%252e%252e%252f%252e%252e%252fetc%252fpasswd", "/..%c0%af..%c0%afetc%c0%afpasswd",
        "//etc/passwd", "/\\..\\..\\etc\\passwd", "/%2fetc%2fpasswd", "/etc/passwd",
        "/proc/self/environ", "/..%2fproc%2fself%2fenviron",
        "/secret.txt", "/../secret.txt", "/..%2fsecret.txt", "/other.json", "/given.json",
        "/traces/other.json", "/./other.json", "/%2e/other.json",
        secret, q(secret), "/" + q(secret, safe=""), "/" + up + secret.lstrip("/"),
        "/assets/../../pyproject.toml", "/assets/..%2f..%2f..%2fpyproject.toml",
        "/assets/%2e%2e%2f%2e%2e%2f%2e%2e%2fpyproject.toml", "/assets/..%2fapp.py",
        "/assets/..\\app.py", "/assets/..%5capp.py", "/assets/%2e%2e/app.py",
        "/assets//etc/passwd", "/assets/%2fetc%2fpasswd", "/assets/" + q(secret),
        "/assets/" + enc + secret.lstrip("/"), "/assets/" + up + "proc/self/environ",
        "/assets/tracekit.js%00../../app.py", "/assets/..;/app.py", "/assets/....//app.py",
        "/_dash-component-suites/..%2f..%2fsecret.txt",
        "/_dash-component-suites/dash/" + up + "etc/passwd",
        "/_dash-component-suites/dash/" + enc + "etc%2fpasswd",
        "/_dash-component-suites/dash/dcc/" + "%2e%2e%2f" * 12 + "etc%2fpasswd",
        "/_dash-component-suites/dash/dash.py", "/_dash-component-suites/dash/__init__.py",
        "/_dash-component-suites/dash/deps/..%2f__init__.py",
        "/_dash-component-suites/tracekit/viz/app.py", "/_dash-component-suites/tracekit/app.py",
        "/_dash-component-suites/plotly/package_data/..%2f..%2fplotly%2f__init__.py",
        "/_dash-component-suites/%2fetc/passwd", "/_dash-component-suites/" + q(secret),
        "/_dash-component-suites/dash/" + up + secret.lstrip("/"),
        "/_dash-component-suites/dash/dcc/async-graph.js?path=/etc/passwd",
        "/_dash-layout?file=/etc/passwd&path=../secret.txt",
        "/_dash-dependencies?path=" + q(secret), "/_favicon.ico?v=../../../etc/passwd",
        "/_favicon.ico/../../secret.txt", "/_reload-hash", "/_alive_" + "x" * 20,
        "/?trace=" + q(str(server.root / "traces" / "other.json")),
        f"http://127.0.0.1:{server.port}/../../etc/passwd", "file:///etc/passwd",
    ]  # fmt: skip
    return targets


def test_traversal_attempts_read_nothing_outside(server: Server) -> None:
    seen = {}

    def is_index(body: bytes) -> bool:
        return body.startswith(b"<!DOCTYPE html>") and b"<title>tracekit viz</title>" in body

    assert is_index(server.request("GET", "/")[1])
    for target in _targets(server):
        for method in ("GET", "HEAD", "POST"):
            status, body = server.request(method, target, b"" if method == "POST" else None)
            seen[(method, target)] = status
            assert server.leaks(body) == [], (method, target, status, body[:300])
            # Dash answers unknown paths with its index page (client-side routing)
            if method == "GET" and status == 200 and not target.startswith("/_dash-layout"):
                assert is_index(body) or not urllib.parse.urlsplit(target).path.endswith(
                    ("passwd", "environ", "secret.txt", "other.json", "app.py", "pyproject.toml")
                ), (target, body[:300])
    assert len(seen) >= 3 * 60
    assert server.proc.poll() is None  # still up
    assert server.request("GET", "/_dash-layout")[0] == 200


def _callback_bodies(server: Server) -> Iterator[dict[str, Any]]:
    status, body = server.request("GET", "/_dash-dependencies")
    assert status == 200
    deps = json.loads(body)
    secret = str(server.root / "secret.txt")
    other = str(server.root / "traces" / "other.json")
    values: list[Any] = [
        "/etc/passwd", secret, other, "../secret.txt", "../../../../etc/passwd",
        "file://" + secret, {"path": secret}, [secret, 0], [0, secret], [[secret]], None, -1,
        10**9, 1e308, "0", True, {"__class__": "os.system"}, "__import__('os')",
        "{{config}}", {"$ref": "file://" + secret},
    ]  # fmt: skip
    for dep in deps:
        output = dep["output"]
        outs = [{"id": o.split(".")[0], "property": o.split(".")[1].split("@")[0]}
                for o in output.strip(".").split("...")]  # fmt: skip
        for v in values:
            yield {
                "output": output,
                "outputs": outs if output.startswith("..") else outs[0],
                "inputs": [
                    {"id": i["id"], "property": i["property"], "value": v} for i in dep["inputs"]
                ],  # fmt: skip
                "changedPropIds": [f"{i['id']}.{i['property']}" for i in dep["inputs"][:1]],
                "state": [
                    {"id": s["id"], "property": s["property"], "value": v} for s in dep["state"]
                ],  # fmt: skip
            }
    for output in ("secret.children", "..given.json.path...trace.data..", "../../etc/passwd"):
        yield {"output": output, "outputs": {"id": "x", "property": "children"},
               "inputs": [{"id": "trace", "property": "path", "value": secret}]}  # fmt: skip
    yield {"output": "graph.figure", "inputs": "/etc/passwd"}
    yield {"path": secret}


def test_callback_payloads_with_paths_read_nothing(server: Server) -> None:
    n = 0
    for body in _callback_bodies(server):
        raw = json.dumps(body).encode()
        status, resp = server.request(
            "POST", "/_dash-update-component", raw, {"Content-Type": "application/json"}
        )
        n += 1
        assert server.leaks(resp) == [], (body, status, resp[:300])
        assert status in (200, 204, 400, 500), (body, status)
    secret = str(server.root / "secret.txt")
    for raw in (
        b"not json",
        b"\xff\xfe",
        b"[" * 100_000,
        json.dumps({"inputs": [secret]}).encode(),
    ):
        status, resp = server.request("POST", "/_dash-update-component", raw,
                                      {"Content-Type": "application/json"})  # fmt: skip
        assert server.leaks(resp) == [] and status < 600
    assert n > 100
    assert server.proc.poll() is None
    status, body = server.request("GET", "/_dash-layout")
    assert status == 200 and b"given.json" in body


# -- no pickle, eval or exec of trace content ------------------------------------------------
BANNED_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle",
                  "joblib", "yaml", "jsonpickle"}  # fmt: skip
BANNED_CALLS = {"eval", "exec", "compile", "__import__", "execfile"}
BANNED_ATTRS = {"loads", "load", "unsafe_load", "import_module"}
#: (file, function, call): the one dynamic import, of names from a literal tuple (cli.py).
ALLOWED = {
    ("tracekit/cli.py", "_known_errors", "__import__"),
    ("tracekit/cli.py", "_forget_unhandled_interrupt", "exec"),  # exec("pass"): a constant
}
#: Functions of tracekit.viz that may read a file: none (load_trace reads the given traces).
VIZ_READS = {"open", "read_text", "read_bytes", "send_file", "send_from_directory", "load_trace"}


def scan(source: str, filename: str) -> list[str]:
    """Dangerous constructs in one Python source: banned imports, eval/exec/compile, a
    pickle-like ``.load(s)``, ``np.load(allow_pickle=True)``; as ``file:line: what``."""
    found = []
    tree = ast.parse(source, filename)
    funcs: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for sub in ast.walk(node):
                funcs.setdefault(id(sub), node.name)
    for node in ast.walk(tree):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in BANNED_MODULES:
                    found.append(f"{where}: import {a.name}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
            BANNED_MODULES
        ):
            found.append(f"{where}: from {node.module} import ...")
        elif isinstance(node, ast.Call):
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(
                fn, ast.Attribute) else ""  # fmt: skip
            owner = fn.value.id if isinstance(fn, ast.Attribute) and isinstance(
                fn.value, ast.Name) else ""  # fmt: skip
            allowed = (filename, funcs.get(id(node), ""), name) in ALLOWED
            if isinstance(fn, ast.Name) and name in BANNED_CALLS and not allowed:
                found.append(f"{where}: {name}(...)")
            elif name in BANNED_ATTRS and owner in BANNED_MODULES | {"importlib"}:
                found.append(f"{where}: {owner}.{name}(...)")
            elif name == "load" and owner in ("np", "numpy"):
                if any(k.arg == "allow_pickle" for k in node.keywords):
                    found.append(f"{where}: np.load(allow_pickle=...)")
    return found


def test_the_scanner_finds_what_it_looks_for() -> None:
    bad = (
        "import pickle\nfrom yaml import load\nimport numpy as np\n"
        "def f(t):\n    eval(t)\n    exec(t)\n    pickle.loads(t)\n"
        "    np.load(t, allow_pickle=True)\n    __import__(t)\n    compile(t, 'x', 'exec')\n"
    )
    found = scan(bad, "x.py")
    assert len(found) == 8, found


def test_no_pickle_eval_or_exec_in_tracekit() -> None:
    found = []
    files = sorted(PKG.rglob("*.py"))
    assert len(files) > 20
    for f in files:
        found += scan(f.read_text(encoding="utf-8"), str(f.relative_to(REPO)))
    assert found == [], "\n".join(found)


#: Third-party scripts shipped in tracekit/viz/assets: name -> sha256 of the upstream file
#: (npm ``plotly.js-cartesian-dist-min@4.1.1``, ``plotly-cartesian.min.js``, unmodified).
VENDORED = {
    "plotly-cartesian-4.1.1.min.js": (
        "79542150855a52c567260e3137095dbe2b744e6d702a5cabe67da246942fba7a"
    ),
}


def test_vendored_scripts_are_the_pinned_upstream_files() -> None:
    """Third-party scripts in assets/ are the pinned upstream bundles, each with its licence
    beside it (plotly.js's own code is not scanned by the rule below: the full bundle that
    Dash serves otherwise holds the same constructs); every other script is scanned."""
    import hashlib

    assets = PKG / "viz" / "assets"
    for name, digest in VENDORED.items():
        assert hashlib.sha256((assets / name).read_bytes()).hexdigest() == digest, name
        licence = assets / name.replace(".min.js", ".LICENSE.txt")
        assert "MIT License" in licence.read_text(), licence


def test_trace_content_is_parsed_as_json_only() -> None:
    """load_trace reads the bytes and parses them with json.loads (with NaN refused); the
    dashboard reads no file itself: its only reader is load_trace, called in create_app."""
    tree = ast.parse((PKG / "trace" / "format.py").read_text())
    fn = next(
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "load_trace"
    )
    calls = {ast.unparse(c.func) for c in ast.walk(fn) if isinstance(c, ast.Call)}
    # the bytes are read with open + read, bounded by MAX_TRACE_BYTES (issue 16)
    assert "json.loads" in calls and "open" in calls and "fh.read" in calls
    for f in sorted((PKG / "viz").rglob("*.py")):
        tree = ast.parse(f.read_text(), str(f))
        for c in ast.walk(tree):
            if not isinstance(c, ast.Call):
                continue
            name = c.func.id if isinstance(c.func, ast.Name) else getattr(c.func, "attr", "")
            if name in VIZ_READS:
                inside = [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
                          and any(x is c for x in ast.walk(n))]  # fmt: skip
                assert name == "load_trace" and inside and inside[-1] == "_load", (f, c.lineno)
    for js in sorted((PKG / "viz" / "assets").glob("*.js")):
        if js.name in VENDORED:  # third-party, pinned byte for byte below
            continue
        text = js.read_text()
        for bad in (r"\beval\s*\(", r"new\s+Function\s*\(", r"\.innerHTML\b", r"document\.write",
                    r"setTimeout\s*\(\s*['\"]", r"dangerouslySetInnerHTML"):  # fmt: skip
            assert not re.search(bad, text), (js.name, bad)
    for f in sorted((PKG / "viz").rglob("*.py")):
        assert "dangerously_allow_html" not in f.read_text(), f


# -- issue 16: Host header (DNS rebinding), request size, port in use, Ctrl-C -----------------
def _raw(port: int, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
    """One request as raw bytes (http.client adds its own Host header)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        try:
            s.sendall(head + body)
        except OSError:  # the server may refuse and close before a big body is sent
            pass
        out = b""
        try:  # to the end of the response (Connection: close), or its head for an early refusal
            while (chunk := s.recv(65536)) and not (body and b"\r\n\r\n" in out + chunk):
                out += chunk
            out += chunk
        except OSError:
            pass
    status = int(out.split(b" ", 2)[1]) if out.startswith(b"HTTP/") else 0
    return status, out


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize(
    "host",
    ["evil.example.com", "evil.example.com:8050", "localhost.evil.example", "127.0.0.1.nip.io", ""],
)
def test_foreign_host_header_gets_400_and_no_trace(server: Server, host: str) -> None:
    for target in ("/", "/_dash-layout", "/_dash-dependencies"):
        head = f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
        status, out = _raw(server.port, head)
        assert status == 400, (host, target, out[:300])
        assert b"given.json" not in out and b"tracekit demo" not in out, out
        assert host.encode() not in out or not host  # the header is not echoed back


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST:{port}", "127.0.0.1:{port}", "[::1]"])
def test_loopback_host_names_are_answered(server: Server, host: str) -> None:
    h = host.format(port=server.port)
    head = f"GET /_dash-layout HTTP/1.1\r\nHost: {h}\r\nConnection: close\r\n\r\n".encode()
    status, out = _raw(server.port, head)
    assert status == 200 and b"given.json" in out


def test_a_50_mb_post_is_refused_without_the_server_growing(server: Server) -> None:
    import concurrent.futures

    before = _rss_kb(server.proc.pid)
    size = 50 * 2**20
    body = b"{" + b" " * (size - 2) + b"}"
    head = (
        f"POST /_dash-update-component HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n"
    ).encode()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(lambda _: _raw(server.port, head, body)[0], range(8)))
    assert set(statuses) <= {413, 0}, statuses  # 0: closed while the client still sent
    assert 413 in statuses
    grew_mb = (_rss_kb(server.proc.pid) - before) / 1024
    assert grew_mb < 20, f"the server grew by {grew_mb:.0f} MB"
    assert server.request("GET", "/_dash-layout")[0] == 200  # and still serves


def test_viz_on_a_port_in_use_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    from tracekit.cli import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["viz", str(GOLDEN), "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"port {port}" in err[0] and "in use" in err[0], err


def test_ctrl_c_stops_viz_cleanly(tmp_path: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracekit", "viz", str(GOLDEN), "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "error" not in err and "Traceback" not in err, err
