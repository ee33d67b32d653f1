"""Issue 16, bounded inputs and CLI values: trace limits checked before the expensive part of
loading and named when exceeded, a linear duplicate-name check, ``tracekit diff`` refusing an
empty or interrupted trace, and sampling values argparse refuses in one line."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

import tracekit.trace.format as tr
from tests.trace.test_format import make_trace
from tracekit.cli import main, record_trace_main
from tracekit.trace.format import TraceError, dumps_trace, load_trace, write_trace


def _one_error_line(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def _write_json(path: Path, trace: dict) -> Path:
    path.write_text(dumps_trace(trace))
    return path


# -- limits -------------------------------------------------------------------------------------
def test_file_size_limit_is_checked_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = write_trace(make_trace(), tmp_path / "t.json")
    monkeypatch.setattr(tr, "MAX_TRACE_BYTES", p.stat().st_size - 1)
    read = []
    real_read = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: read.append(self) or real_read(self))
    with pytest.raises(
        TraceError, match=r"more than [\d,]+ bytes, the size limit .*MAX_TRACE_BYTES"
    ):
        load_trace(p)
    assert read == []


def test_an_endless_device_is_refused_at_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """``tracekit export /dev/zero o.json`` read 2.7 GB before a MemoryError."""
    monkeypatch.setattr(tr, "MAX_TRACE_BYTES", 1 << 20)
    t0 = time.monotonic()
    with pytest.raises(TraceError, match="size limit of a trace file"):
        load_trace("/dev/zero")
    assert time.monotonic() - t0 < 5


def test_default_limits_are_stated() -> None:
    assert tr.MAX_TRACE_BYTES == 1 << 30
    assert (tr.MAX_TRACE_NODES, tr.MAX_TRACE_STEPS, tr.MAX_NAME_CHARS) == (65_536, 2_048, 256)


def test_too_many_steps_is_refused_before_the_schema_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = _write_json(tmp_path / "t.json", make_trace(n_decode=4))
    monkeypatch.setattr(tr, "MAX_TRACE_STEPS", 3)
    monkeypatch.setattr(tr, "validate_trace", lambda *a, **k: pytest.fail("schema pass ran"))
    with pytest.raises(
        TraceError, match=r"5 steps, more than the 3 a trace may hold .*MAX_TRACE_STEPS"
    ):
        load_trace(p)


def test_too_many_nodes_is_refused_before_the_schema_pass(tmp_path: Path) -> None:
    t = make_trace(n_decode=0)
    node = t["nodes"][-1]
    t["nodes"] = [dict(node, id=i, name=f"n{i}") for i in range(tr.MAX_TRACE_NODES + 1)]
    p = tmp_path / "t.json"
    p.write_text(json.dumps(t))
    t0 = time.monotonic()
    with pytest.raises(TraceError, match=r"65,537 nodes, more than the 65,536 .*MAX_TRACE_NODES"):
        load_trace(p)
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize("key", ["name", "op", "family"])
def test_a_long_name_is_refused_and_quoted_short(tmp_path: Path, key: str) -> None:
    t = make_trace()
    t["nodes"][2][key] = "x" * 100_000
    p = _write_json(tmp_path / "t.json", t)
    with pytest.raises(TraceError) as e:
        load_trace(p)
    msg = str(e.value)
    assert f"$.nodes[2].{key} is 100,000 characters" in msg and "MAX_NAME_CHARS" in msg
    assert len(msg) < 400


def test_a_name_at_the_limit_loads(tmp_path: Path) -> None:
    t = make_trace()
    t["nodes"][2]["name"] = "blk.0." + "x" * (tr.MAX_NAME_CHARS - 6)
    assert load_trace(_write_json(tmp_path / "t.json", t))["nodes"][2]["name"].endswith("x")


def test_duplicate_name_check_is_linear(tmp_path: Path) -> None:
    """65,536 nodes with one duplicate took 346 s to reject (names.count per name)."""
    t = make_trace(n_decode=0)
    node = t["nodes"][-1]
    n = tr.MAX_TRACE_NODES
    t["nodes"] = [dict(node, id=i, name=f"n{i}") for i in range(n)]
    t["nodes"][-1]["name"] = "n5"
    t["steps"][0]["nodes"] = [dict(t["steps"][0]["nodes"][-1], id=i) for i in range(n)]
    t0 = time.monotonic()
    with pytest.raises(
        TraceError,
        match=r"\$\.nodes\[65535\]\.name: node name 'n5' appears twice \(also \$\.nodes\[5\]\)",
    ):
        tr._check_references(t, "t.json")
    assert time.monotonic() - t0 < 2


# -- diff ---------------------------------------------------------------------------------------
def test_diff_refuses_an_empty_or_interrupted_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    full = write_trace(make_trace(), tmp_path / "full.json")
    part = make_trace()
    part["complete"] = False
    part["run"]["stop_reason"] = "interrupted"
    part["steps"] = part["steps"][:1]
    pp = write_trace(part, tmp_path / "part.json")
    empty = make_trace()
    empty["complete"] = False
    empty["steps"] = []
    ep = write_trace(empty, tmp_path / "empty.json")
    for x, y in ((full, pp), (pp, full)):
        assert main(["diff", str(x), str(y)]) == 2
        _one_error_line(capsys, "part.json is incomplete", "--allow-incomplete")
    assert main(["diff", str(full), str(ep)]) == 2
    _one_error_line(capsys, "empty.json has no steps")
    assert main(["diff", "--allow-incomplete", str(full), str(ep)]) == 2
    _one_error_line(capsys, "empty.json has no steps")
    assert main(["diff", "--allow-incomplete", str(full), str(pp)]) == 0  # the common step agrees
    capsys.readouterr()


# -- sampling values ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--temperature", "nan"], "--temperature: 'nan' is not a finite number"),
        (["--temperature", "inf"], "--temperature: 'inf' is not a finite number"),
        (["--temperature", "-1"], "--temperature: -1.0 must be >= 0"),
        (["--temperature", "1e-320"], "--temperature: 1e-320 is too small"),
        (["--seed", "-5"], "--seed: -5 must be in 0..2**63-1"),
        (["--seed", str(2**64)], "--seed: 18446744073709551616 must be in 0..2**63-1"),
        (["--top-k", "-1"], "--top-k: -1 must be >= 0"),
    ],
)
def test_bad_sampling_values_are_one_argparse_line(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rc = record_trace_main([*argv, "--no-progress", "-o", str(tmp_path / "t.json")])
    assert rc == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err, err
    assert not (tmp_path / "t.json").exists()
    assert os.listdir(tmp_path) == []


def test_a_tiny_temperature_samples_the_top_token_without_nan() -> None:
    """``--temperature 1e-320`` ended in "Probabilities contain NaN" (logits / T = inf)."""
    import numpy as np

    from tracekit.runner.execute import Sampling

    logits = np.array([1.0, 5.0, 5.0 - 1e-3, -3.0], dtype=np.float32)
    for t in (1e-320, 5e-324, 1e-300):
        for k in (0, 2):
            assert Sampling(temperature=t, top_k=k, seed=0)(logits) == 1
