"""Trace file v2 (and v1): round trip, atomic writes, schema rejects with readable messages, goldens."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tracekit.kernels.stats import tensor_stats
from tracekit.runner.record import compact_stats, logit_summary
from tracekit.trace import perf
from tracekit.trace.format import (
    FORMAT,
    VERSION,
    TraceError,
    dumps_trace,
    load_trace,
    validate_trace,
    write_trace,
)

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
CEILINGS = {
    "copy_bandwidth_Bps": 4.0e12,
    "launch_overhead_s": 5e-6,
    "peak_flops": 6.0e14,
    "ridge_flop_per_byte": 150.0,
    "measured_at": "2026-01-01T00:00:00Z",
    "method": "test values",
}
_LAYER_OPS = [
    ("attn_norm", "rms_norm", "norm"),
    ("attn_q", "matmul", "matmul"),
    ("attn", "attention", "attention"),
    ("attn_residual", "add", "elementwise"),
    ("ffn_up", "matmul", "matmul"),
    ("ffn_residual", "add", "elementwise"),
]


def make_trace(
    n_layer: int = 2, n_decode: int = 2, n_embd: int = 64, prompt: int = 5, seed: int = 0,
    stats: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """A valid trace built by hand (real stats of random tensors), for format-level tests."""
    rng = np.random.default_rng(seed)
    names = [("token_embd", "embed_rows", "embed", None)]
    for il in range(n_layer):
        names += [(f"blk.{il}.{n}", op, fam, il) for n, op, fam in _LAYER_OPS]
    names += [("output_norm", "rms_norm", "norm", None), ("output", "matmul", "matmul", None)]
    nodes = [
        {
            "id": i,
            "name": n,
            "op": op,
            "family": fam,
            "layer": il,
            "inputs": [],
            "weight_type": None,
        }
        for i, (n, op, fam, il) in enumerate(names)
    ]
    steps = []
    tokens = list(range(1, prompt + 1))
    for k in range(n_decode + 1):
        nt = prompt if k == 0 else 1
        recs = []
        for i, (n, _, _, _) in enumerate(names):
            width = 32 if n == "output" else n_embd
            x = rng.standard_normal((nt, width)).astype(np.float32)
            launch = {
                "kernel": "k", "grid": [1, 1, 1], "block": [256, 1, 1], "threads_launched": 256,
                "threads_working": x.size, "bytes_read": 2 * x.nbytes, "bytes_written": x.nbytes,
                "flops": x.size,
            }  # fmt: skip
            t = 1e-6 * (1 + i % 3)
            recs.append(
                {
                    "id": i,
                    "shape": list(x.shape),
                    "dtype": "float32",
                    "time_s": t,
                    "timing_time_s": t,
                    "capture_cost": 1.2 if stats else None,
                    "launches": [launch],
                    "perf": perf.annotate([launch], t, CEILINGS),
                    "stats": compact_stats(tensor_stats(x, axes=("tokens", "features")))
                    if stats
                    else None,
                }  # fmt: skip
            )
        logits = rng.standard_normal(32)
        chosen = int(np.argmax(logits))
        steps.append(
            {
                "index": k,
                "kind": "prefill" if k == 0 else "decode",
                "name": "prefill" if k == 0 else f"decode {k}",
                "n_tokens": nt,
                "n_past": 0 if k == 0 else prompt + k - 1,
                "input_tokens": tokens if k == 0 else [steps[-1]["logits"]["chosen"]["id"]],
                "wall_s": 1e-3,
                "gpu_s": sum(r["time_s"] for r in recs),
                "nodes": recs,
                "logits": logit_summary(logits, chosen, lambda t: f"t{t}"),
            }  # fmt: skip
        )
    return {
        "format": FORMAT, "version": VERSION, "complete": True, "created": "2026-01-01T00:00:00Z",
        "tool": {"name": "tracekit", "version": "0.1.0"},
        "model": {
            "name": "hand-made", "path": None, "architecture": "qwen2", "n_layer": n_layer,
            "n_embd": n_embd, "n_head": 4, "n_head_kv": 2, "head_dim": 16, "n_ff": 128,
            "n_vocab": 32, "n_ctx": 64, "file_bytes": 0, "tensor_types": {"Q4_0": 3},
        },
        "run": {
            "backend": "numpy", "device": "CPU", "capture": "full" if stats else "timing",
            "cuda_graph": False, "nvtx": True, "prompt": None, "prompt_tokens": tokens,
            "steps_requested": n_decode, "sampling": {"mode": "greedy"},
            "generated_tokens": [s["logits"]["chosen"]["id"] for s in steps],
            "generated_text": "",
        },
        "ceilings": CEILINGS, "classification": perf.classification(CEILINGS),
        "nodes": nodes, "steps": steps,
    }  # fmt: skip


def test_round_trip(tmp_path: Path) -> None:
    t = make_trace()
    p = write_trace(t, tmp_path / "sub" / "t.json")
    # histograms come back as edges; verdicts are derived on load, not stored
    assert load_trace(p) == perf.derive_trace(json.loads(json.dumps(t)))
    assert not [f for f in p.parent.iterdir() if f.name != "t.json"]  # no temp file left


def test_written_file_has_ordinary_permissions(tmp_path: Path) -> None:
    mask = os.umask(0o022)
    try:
        p = write_trace(make_trace(), tmp_path / "t.json")
        assert p.stat().st_mode & 0o777 == 0o644
        p.chmod(0o600)  # a replaced file keeps its mode
        assert write_trace(make_trace(), p).stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(mask)


def test_numpy_scalars_are_converted(tmp_path: Path) -> None:
    t = make_trace()
    t["steps"][0]["nodes"][0]["time_s"] = np.float32(2e-6)
    t["steps"][0]["n_tokens"] = np.int64(5)
    t["steps"][0]["nodes"][0]["shape"] = np.array([5, 64])
    back = load_trace(write_trace(t, tmp_path / "t.json"))
    assert back["steps"][0]["n_tokens"] == 5 and back["steps"][0]["nodes"][0]["shape"] == [5, 64]


def test_nan_is_refused_with_its_path(tmp_path: Path) -> None:
    t = make_trace()
    t["steps"][1]["nodes"][3]["stats"]["mean"] = float("nan")
    with pytest.raises(TraceError, match=r"\$\.steps\[1\]\.nodes\[3\]\.stats\.mean"):
        write_trace(t, tmp_path / "t.json")
    assert not (tmp_path / "t.json").exists()


def test_atomic_write_keeps_old_file_on_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = write_trace(make_trace(seed=1), tmp_path / "t.json")
    before = p.read_bytes()
    real_fsync = os.fsync

    def crash(fd: int) -> None:  # the data is half on its way when the process "dies"
        raise OSError("simulated crash during write")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="simulated crash"):
        write_trace(make_trace(seed=2), p)
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert p.read_bytes() == before
    assert sorted(f.name for f in tmp_path.iterdir()) == ["t.json"]


def test_interrupt_during_write_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tracekit.trace.format as tr

    real_replace = os.replace

    def interrupted(src: str, dst: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(tr.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_trace(make_trace(), tmp_path / "t.json")
    monkeypatch.setattr(tr.os, "replace", real_replace)
    assert list(tmp_path.iterdir()) == []


def _rejects(t: Any, tmp_path: Path, *patterns: str) -> str:
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(t) if not isinstance(t, str) else t)
    with pytest.raises(TraceError) as ei:
        load_trace(p)
    msg = str(ei.value)
    assert msg.startswith(str(p)), msg  # names the file
    for pat in patterns:
        assert pat in msg, msg
    assert "\n" not in msg and len(msg) < 400, msg
    return msg


def test_rejects_missing_key(tmp_path: Path) -> None:
    t = make_trace()
    del t["steps"][1]["nodes"][2]["launches"]  # a measurement (perf is derived, not stored)
    _rejects(t, tmp_path, "$.steps[1].nodes[2]", "'launches' is a required property")
    t = make_trace()
    del t["ceilings"]
    _rejects(t, tmp_path, "'ceilings' is a required property")


def test_rejects_wrong_types(tmp_path: Path) -> None:
    t = make_trace()
    t["steps"][0]["nodes"][4]["time_s"] = "fast"
    _rejects(t, tmp_path, "$.steps[0].nodes[4].time_s", "expected number, got string 'fast'")
    t = make_trace()
    t["steps"][2]["nodes"][1]["stats"]["nan"] = -1
    _rejects(t, tmp_path, "$.steps[2].nodes[1].stats.nan", "-1")
    t = make_trace()
    t["nodes"][3]["layer"] = "three"
    _rejects(t, tmp_path, "$.nodes[3].layer", "expected integer or null")
    t = make_trace()
    t["steps"][0]["nodes"] = {"not": "a list"}
    _rejects(t, tmp_path, "$.steps[0].nodes", "expected array")


def test_rejects_values_a_reader_cannot_draw(tmp_path: Path) -> None:
    """Found by scripts/fuzz_traces.py (seed 10, the H200 graph trace as base): a histogram
    range upside down or of infinite width (the dashboard's bars are (hi - lo) / bins wide),
    ceilings whose ridge overflows, a node that ends before it starts."""
    t = make_trace()
    t["steps"][1]["nodes"][2]["stats"]["hist"]["edges"][0] = 1e308
    _rejects(t, tmp_path, "$.steps[1].nodes[2].stats.hist.edges", "ascending")
    t = make_trace()
    lo_hi = json.loads(dumps_trace(t))  # the stored form: lo, hi, counts
    lo_hi["steps"][1]["logits"]["hist"]["lo"] = 1e308
    _rejects(lo_hi, tmp_path, "$.steps[1].logits.hist", "lo 1e+308", "lo <= hi")
    lo_hi["steps"][1]["logits"]["hist"].update(lo=-1e308, hi=1e308)
    _rejects(lo_hi, tmp_path, "$.steps[1].logits.hist", "finite width")
    t = make_trace()
    t["ceilings"] = {**t["ceilings"], "copy_bandwidth_Bps": 1e-300}  # > 0: the schema admits it
    _rejects(t, tmp_path, "$.ceilings", "1e-300", "not finite")
    raw = json.loads((GOLDEN / "trace-v2-demo-numpy.json").read_text())
    rec = raw["steps"][1]["nodes"][3]
    rec["end_ns"] = rec["start_ns"] - 1
    _rejects(raw, tmp_path, "$.steps[1].nodes[3].end_ns", "before its start_ns")
    t = make_trace()  # the boundary cases stay valid: a one-value histogram, end = start
    t["steps"][1]["nodes"][2]["stats"]["hist"]["edges"] = [0.5] * 33
    raw = json.loads((GOLDEN / "trace-v2-demo-numpy.json").read_text())
    raw["steps"][1]["nodes"][3]["end_ns"] = raw["steps"][1]["nodes"][3]["start_ns"]
    load_trace(write_trace(t, tmp_path / "ok.json"))
    (tmp_path / "ok2.json").write_text(json.dumps(raw))
    load_trace(tmp_path / "ok2.json")


def test_arch_settings_hold_what_the_overview_shows(tmp_path: Path) -> None:
    """Found by fuzz_traces seed 12 on the SmolLM2 H200 trace: arch_settings without `rope`
    loaded, then the dashboard's overview raised KeyError. Present, it must hold rope,
    rope_base and attn_scale; absent (older traces) is fine."""
    t = make_trace()
    t["model"]["arch_settings"] = {"rope": "neox", "rope_base": 1e6, "attn_scale": 0.125}
    load_trace(write_trace(t, tmp_path / "ok.json"))
    for key in ("rope", "rope_base", "attn_scale"):
        bad = make_trace()
        bad["model"]["arch_settings"] = {**t["model"]["arch_settings"]}
        del bad["model"]["arch_settings"][key]
        _rejects(bad, tmp_path, "$.model.arch_settings", f"'{key}' is a required property")
    bad = make_trace()  # linear rope scaling without its factor (the overview prints it)
    bad["model"]["arch_settings"] = {**t["model"]["arch_settings"], "rope_scaling": "linear"}
    _rejects(bad, tmp_path, "$.model.arch_settings", "'rope_scaling_factor' is a required")


def test_rejects_huge_value_quoted_short(tmp_path: Path) -> None:
    t = make_trace()
    t["steps"][0]["input_tokens"] = "x" * 100_000
    msg = _rejects(t, tmp_path, "$.steps[0].input_tokens", "...")
    assert len(msg) < 300


def test_rejects_bad_references(tmp_path: Path) -> None:
    t = make_trace()
    t["steps"][1]["nodes"].pop()
    _rejects(t, tmp_path, "$.steps[1].nodes", "records for")
    t = make_trace()
    t["nodes"][2]["name"] = "blk.0/attn"
    _rejects(t, tmp_path, "$.nodes[2].name")
    t = make_trace()
    t["steps"][2]["name"] = "decode 7"
    _rejects(t, tmp_path, "$.steps[2].name")


def test_rejects_newer_version_clearly(tmp_path: Path) -> None:
    t = make_trace()
    t["version"] = VERSION + 1
    t["something_new"] = {}
    del t["steps"]  # a newer file may differ in anything: the version is checked first
    _rejects(
        t, tmp_path, f"version {VERSION + 1} is newer", f"version {VERSION}", "upgrade tracekit"
    )


def test_rejects_not_a_trace(tmp_path: Path) -> None:
    _rejects([1, 2], tmp_path, "not a tracekit trace")
    _rejects({"format": "other"}, tmp_path, "not a tracekit trace")
    _rejects({"format": FORMAT, "version": "1"}, tmp_path, "$.version must be an integer")


def test_rejects_truncated_and_garbage(tmp_path: Path) -> None:
    text = dumps_trace(make_trace())
    for cut in (1, len(text) // 3, len(text) - 1):
        _rejects(text[:cut], tmp_path, "not valid JSON (truncated?)")
    _rejects("", tmp_path, "not valid JSON")
    _rejects('{"format": NaN}', tmp_path, "NaN")
    p = tmp_path / "bin.json"
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TraceError, match="not UTF-8"):
        load_trace(p)


def test_missing_file_and_folder(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such trace file"):
        load_trace(tmp_path / "nope.json")
    with pytest.raises(TraceError, match="is a folder"):
        load_trace(tmp_path)


def test_timing_trace_without_stats_is_valid() -> None:
    validate_trace(json.loads(dumps_trace(make_trace(stats=False))))


def test_histograms_are_stored_as_lo_hi_and_come_back_exact(tmp_path: Path) -> None:
    t = make_trace()
    text = dumps_trace(t)
    on_disk = json.loads(text)["steps"][1]["nodes"][2]["stats"]["hist"]
    assert set(on_disk) == {"lo", "hi", "counts"}  # 2 numbers instead of 33 edges
    assert "edges" in t["steps"][1]["nodes"][2]["stats"]["hist"]  # the input is not changed
    back = load_trace(write_trace(t, tmp_path / "t.json"))
    assert (
        back["steps"][1]["nodes"][2]["stats"]["hist"] == t["steps"][1]["nodes"][2]["stats"]["hist"]
    )
    assert back["steps"][0]["logits"]["hist"] == t["steps"][0]["logits"]["hist"]


def test_edges_and_counts_must_agree(tmp_path: Path) -> None:
    t = make_trace()
    t["steps"][1]["nodes"][2]["stats"]["hist"]["edges"] = [0.0, 1.0, 5.0]  # not uniform: kept
    _rejects(t, tmp_path, "$.steps[1].nodes[2].stats.hist", "3 edges for 32 counts")


def test_golden_traces_keep_loading(tmp_path: Path) -> None:
    goldens = sorted(GOLDEN.glob("*.json"))
    assert goldens, f"no golden traces in {GOLDEN}"
    for p in goldens:
        t = load_trace(p)
        assert t["version"] <= VERSION
        assert t["steps"] and all(len(s["nodes"]) == len(t["nodes"]) for s in t["steps"])
        # rewritten by this version, it reads back the same
        assert load_trace(write_trace(t, tmp_path / p.name)) == t


# -- large hostile arrays: refused fast, with the same kind of message ----------------------------
def test_array_past_its_bound_is_refused_by_the_bound(tmp_path: Path) -> None:
    # 10^6 items took ~11 s (an error built per item before one was picked); now the schema's
    # maxItems refuses the array and its items are not looked at.
    t = make_trace()
    t["run"]["notes"] = list(range(10**6))
    _rejects(t, tmp_path, "invalid trace at $.run.notes: an array of 1000000 items violates "
             "maxItems 4096")  # fmt: skip
    t = make_trace()
    t["nodes"] = [t["nodes"][0]] * 70_000  # valid objects: the bound, not 70,000 validations
    # the node limit, checked before the schema pass, answers first (issue 16)
    _rejects(t, tmp_path, "70,000 nodes, more than the 65,536 a trace may hold (MAX_TRACE_NODES)")
    t = make_trace()
    t["steps"][1]["nodes"][2]["launches"] = [{"kernel": "k"}] * 5000
    _rejects(t, tmp_path, "$.steps[1].nodes[2].launches: an array of 5000 items violates")


def test_unbounded_array_of_bad_items_names_the_first(tmp_path: Path) -> None:
    t = make_trace()
    t["run"]["prompt_tokens"] = ["a"] * 10**6
    _rejects(t, tmp_path, "invalid trace at $.run.prompt_tokens[0]: expected integer, got "
             "string 'a'")  # fmt: skip
    t = make_trace()
    t["steps"] = [0] * 2000  # under MAX_TRACE_STEPS: the schema names the first bad item
    _rejects(t, tmp_path, "invalid trace at $.steps[0]: expected object, got integer 0")
    t["steps"] = [0] * 10**6
    _rejects(t, tmp_path, "1,000,000 steps, more than the 2,048 a trace may hold (MAX_TRACE_STEPS)")


def test_large_value_of_the_wrong_type_is_quoted_short(tmp_path: Path) -> None:
    t = make_trace()
    t["model"] = [t["model"]] * 20_000
    msg = _rejects(t, tmp_path, "invalid trace at $.model: expected object, got array [{")
    assert msg.endswith("...") and len(msg) < 200, msg
    t = make_trace()
    t["run"]["backend"] = [0] * 10**6
    _rejects(t, tmp_path, "$.run.backend: [0, 0, 0", "... is not one of 'cupy', 'numpy'")


def test_record_counts_are_checked_before_the_records(tmp_path: Path) -> None:
    t = make_trace()
    n = len(t["nodes"])
    t["steps"][1]["nodes"] = t["steps"][1]["nodes"] * 500
    t["steps"][1]["nodes"][-1]["time_s"] = "fast"  # would be found after all the records
    _rejects(t, tmp_path, f"$.steps[1].nodes: {n * 500} records for {n} topology nodes")
    t = make_trace()
    t["steps"] = [t["steps"][0]] * 200  # every copy schema-valid: the indices tell at once
    t["steps"][-1]["wall_s"] = "slow"
    _rejects(t, tmp_path, "invalid trace at $.steps[1].index: 0 != 1")
    t = make_trace()
    t["steps"][1]["index"] = True  # not an integer: the schema's to say
    _rejects(t, tmp_path, "invalid trace at $.steps[1].index: expected integer, got boolean")


def test_of_several_errors_the_most_relevant_is_reported(tmp_path: Path) -> None:
    # jsonschema's best_match among the first errors: the shallowest, the first of siblings.
    t = make_trace()
    t["steps"][2]["nodes"][3]["time_s"] = "slow"
    t["steps"][0]["nodes"][1]["time_s"] = "fast"
    t["steps"][1]["wall_s"] = -1.0
    _rejects(t, tmp_path, "$.steps[1].wall_s: -1.0 violates minimum 0")
    t["steps"][1]["wall_s"] = 1.0
    _rejects(t, tmp_path, "$.steps[0].nodes[1].time_s: expected number, got string 'fast'")


def test_integers_past_64_bits_are_still_refused(tmp_path: Path) -> None:
    t = make_trace()
    t["model"]["file_bytes"] = 10**18  # 19 digits, in range: accepted
    p = tmp_path / "t.json"
    p.write_text(json.dumps(t))
    assert load_trace(p)["model"]["file_bytes"] == 10**18
    t["model"]["file_bytes"] = 2**64
    _rejects(t, tmp_path, "holds the integer 18446744073709551616")


def test_bounds_admit_the_committed_traces() -> None:
    repo = Path(__file__).resolve().parents[2]
    paths = sorted((repo / "traces").glob("*.json")) + sorted(GOLDEN.glob("*.json"))
    assert paths
    for p in paths:
        assert load_trace(p)["steps"]


# -- temp files of the atomic write ---------------------------------------------------------------
def _temp_files(folder: Path) -> list[str]:
    return sorted(f.name for f in folder.iterdir() if ".tmp-" in f.name)


def test_temp_file_is_named_after_the_output_and_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import re
    import socket

    import tracekit.trace.format as tr

    seen = []
    real_replace = os.replace

    def spy(src: str, dst: str) -> None:
        seen.append(Path(src).name)
        real_replace(src, dst)

    monkeypatch.setattr(tr.os, "replace", spy)
    write_trace(make_trace(), tmp_path / "t.json")
    host = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname())[:32]
    assert re.fullmatch(rf"\.t\.json\.tmp-{os.getpid()}-[0-9a-f]{{8}}@{re.escape(host)}", seen[0])
    assert sorted(f.name for f in tmp_path.iterdir()) == ["t.json"]


def _dead_pid() -> int:
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid  # reaped: no process has it (until the kernel hands it out again)


def test_next_write_removes_temp_files_of_dead_writers_only(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tracekit.trace.format import _host, remove_stale_temp_files

    dead, me, host = _dead_pid(), os.getpid(), _host()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        files = {
            f".t.json.tmp-{dead}-0123abcd@{host}": False,  # dead writer here: removed
            f".t.json.tmp-{alive.pid}-0123abcd@{host}": True,  # a live writer's
            f".t.json.tmp-{me}-0123abcd@{host}": True,  # this process's (another thread)
            f".t.json.tmp-{dead}-0123abcd@otherhost": True,  # cannot be looked up from here
            f".t.json.tmp-{dead}-89abcdef@otherhost": False,  # ... unless a day old
            f".u.json.tmp-{dead}-0123abcd@{host}": True,  # another output's
            ".t.json.tmp-notapid": True,  # not a name the writer makes
            ".t.json.abc123.tmp": True,  # an older tracekit's (mkstemp) name: no pid to check
        }
        for name in files:
            (tmp_path / name).write_text("partial")
        old = os.stat(tmp_path / f".t.json.tmp-{dead}-89abcdef@otherhost").st_mtime - 2 * 86400
        os.utime(tmp_path / f".t.json.tmp-{dead}-89abcdef@otherhost", (old, old))
        write_trace(make_trace(), tmp_path / "t.json")
        left = {f.name for f in tmp_path.iterdir()}
        assert left == {n for n, keep in files.items() if keep} | {"t.json"}
        assert remove_stale_temp_files(tmp_path / "t.json") == []  # nothing more to do
    finally:
        alive.kill()
        alive.wait()
    # once the writer is gone, its file goes too
    removed = remove_stale_temp_files(tmp_path / "t.json")
    assert [p.name for p in removed] == [f".t.json.tmp-{alive.pid}-0123abcd@{host}"]


def test_temp_file_left_by_sigkill_is_removed_by_the_next_write(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    out = tmp_path / "t.json"
    write_trace(make_trace(seed=1), out)
    before = out.read_bytes()
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import os, sys, time\n"
         "import tracekit.trace.format as tr\n"
         "def stuck(src, dst):\n"
         "    print(src, flush=True)\n"
         "    time.sleep(60)\n"
         "os.replace = stuck\n"
         "tr.atomic_write_text(sys.argv[1], 'x' * 100000)\n",
         str(out)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdout is not None
    tmp = Path(child.stdout.readline().strip())  # written, fsynced, about to be renamed
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert tmp.exists() and tmp.stat().st_size == 100000 and out.read_bytes() == before
    assert _temp_files(tmp_path) == [tmp.name]
    write_trace(make_trace(seed=2), out)
    assert _temp_files(tmp_path) == [] and load_trace(out)["complete"]


def test_v1_golden_is_judged_by_the_current_model_and_marked_legacy() -> None:
    t = load_trace(GOLDEN / "trace-v1-demo-numpy.json")
    assert t["version"] == 1 and t["derived"]["legacy"] and "v1" in t["derived"]["note"]
    assert t["derived"]["time_label"] == "CPU time"
    assert t["classification"]["rule"] == perf.RULE
    raw = json.loads((GOLDEN / "trace-v1-demo-numpy.json").read_text())
    for step, raw_step in zip(t["steps"], raw["steps"], strict=True):
        assert step["breakdown"] is None  # v1 steps carry no device intervals
        for rec, old in zip(step["nodes"], raw_step["nodes"], strict=True):
            p = rec["perf"]
            assert p == perf.annotate(old["launches"], old["time_s"], raw["ceilings"], "host")
            assert p["fraction_of_ceiling"] is None or p["fraction_of_ceiling"] <= 1.0


def test_v2_golden_stores_measurements_only() -> None:
    raw = json.loads((GOLDEN / "trace-v2-demo-numpy.json").read_text())
    assert raw["version"] == 2 and "classification" not in raw
    rec = raw["steps"][1]["nodes"][3]
    assert "perf" not in rec and {"start_ns", "end_ns", "queued_ns"} <= rec.keys()
    assert raw["steps"][1]["launch_mode"] == "host" and raw["steps"][1]["span_ns"] > 0
    t = load_trace(GOLDEN / "trace-v2-demo-numpy.json")
    assert not t["derived"]["legacy"] and all(s["breakdown"] for s in t["steps"])
