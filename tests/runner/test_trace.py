"""Trace file v1: round trip, atomic writes, schema rejects with readable messages, goldens."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tracekit.kernels.stats import tensor_stats
from tracekit.runner import perf
from tracekit.runner.record import compact_stats, logit_summary
from tracekit.runner.trace import (
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
    assert load_trace(p) == json.loads(json.dumps(t))  # histograms come back as edges
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
    import tracekit.runner.trace as tr

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
    del t["steps"][1]["nodes"][2]["perf"]
    _rejects(t, tmp_path, "$.steps[1].nodes[2]", "'perf' is a required property")
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
    t["version"] = 2
    t["something_new"] = {}
    del t["steps"]  # a newer file may differ in anything: the version is checked first
    _rejects(t, tmp_path, "version 2 is newer", "version 1", "upgrade tracekit")


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
