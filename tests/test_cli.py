"""The CLI: every user error is one line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from tests.trace.test_format import make_trace
from tracekit.cli import main, parse_tokens, record_trace_main
from tracekit.trace.format import load_trace, write_trace

DATA = Path(__file__).resolve().parent / "data"


def _one_error_line(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def synthetic_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tracekit.model.synthetic import write_synthetic_model

    return write_synthetic_model(tmp_path_factory.mktemp("m") / "q.gguf", "qwen2")


def test_info_prints_architecture_dimensions_types(
    synthetic_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["info", str(synthetic_model), "--tensors"]) == 0
    out = capsys.readouterr().out
    assert "architecture: qwen2" in out and "layers:       2" in out and "n_embd:       256" in out
    assert "Q4_K" in out and "bytes)" in out and "blk.0.attn_q.weight" in out


def test_info_missing_and_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", str(tmp_path / "nope.gguf")]) == 2
    _one_error_line(capsys, "nope.gguf", "does not exist")
    assert main(["info", str(tmp_path)]) == 2
    _one_error_line(capsys, "is a folder")


@pytest.mark.parametrize("cut", [0, 3, 10, 100, 1000, -100])
def test_info_truncated_gguf(
    synthetic_model: Path, tmp_path: Path, cut: int, capsys: pytest.CaptureFixture[str]
) -> None:
    data = synthetic_model.read_bytes()
    p = tmp_path / "cut.gguf"
    p.write_bytes(data[:cut] if cut >= 0 else data[:cut])
    assert main(["info", str(p)]) == 2
    _one_error_line(capsys)


def test_info_garbage_and_flipped_bytes(
    synthetic_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = tmp_path / "g.gguf"
    p.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    assert main(["info", str(p)]) == 2
    _one_error_line(capsys)
    data = bytearray(synthetic_model.read_bytes())
    data[8:16] = (2**62).to_bytes(8, "little")  # tensor count: absurd
    p.write_bytes(bytes(data))
    assert main(["info", str(p)]) == 2
    _one_error_line(capsys)


def test_info_unsupported_architecture(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "mamba.gguf"
    w = gguf.GGUFWriter(str(p), "mamba")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((8, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert main(["info", str(p)]) == 2
    _one_error_line(capsys, "mamba")


def test_record_trace_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert record_trace_main([str(tmp_path / "missing.gguf")]) == 2
    _one_error_line(capsys, "does not exist")
    assert record_trace_main(["--tokens", "1,x,3", "-o", str(tmp_path / "t.json")]) == 2
    _one_error_line(capsys, "'x' at position 1 is not an integer id")
    assert record_trace_main(["--steps", "-1"]) == 2
    _one_error_line(capsys, "--steps -1 must be >= 0")
    assert not (tmp_path / "t.json").exists()


def test_record_trace_bad_model_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "bad.gguf"
    p.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 30)
    assert record_trace_main([str(p), "-o", str(tmp_path / "t.json"), "--no-progress"]) == 2
    _one_error_line(capsys)
    assert not (tmp_path / "t.json").exists()


def test_record_trace_cupy_unavailable(
    synthetic_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tracekit.kernels.backend import cupy_usable

    if cupy_usable()[0]:
        pytest.skip("cupy is usable here")
    rc = record_trace_main(
        [str(synthetic_model), "--backend", "cupy", "-o", str(tmp_path / "t.json")]
    )
    assert rc == 2
    _one_error_line(capsys, "backend 'cupy' is not usable here")


def test_parse_tokens() -> None:
    assert parse_tokens("1,2, 3") == [1, 2, 3] and parse_tokens("4 5") == [4, 5]


def test_export_diff_ncu_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_trace(make_trace(n_layer=2, n_decode=2), tmp_path / "a.json")
    assert main(["export", "--format", "chrome", str(a), str(tmp_path / "a.chrome.json")]) == 0
    assert json.loads((tmp_path / "a.chrome.json").read_text())["traceEvents"]
    assert main(["diff", str(a), str(a)]) == 0
    assert "first divergence: none" in capsys.readouterr().out
    b = make_trace(n_layer=2, n_decode=2)
    b["steps"][1]["nodes"][3]["stats"]["max"] += 5.0
    bp = write_trace(b, tmp_path / "b.json")
    assert main(["diff", str(a), str(bp)]) == 1
    out = capsys.readouterr().out
    assert f"first divergence: decode 1 / {b['nodes'][3]['name']}: max" in out
    assert main(["diff", "--json", str(a), str(bp)]) == 1
    assert json.loads(capsys.readouterr().out)["first_divergence"]["metric"] == "max"
    t = make_trace(n_layer=2, n_decode=2)
    i = next(n["id"] for n in t["nodes"] if n["name"] == "blk.0.ffn_up")
    for s in t["steps"]:
        la = s["nodes"][i]["launches"][0]
        s["nodes"][i]["launches"] = [la, dict(la)]
    tp = write_trace(t, tmp_path / "t.json")
    out_p = tmp_path / "t.ncu.json"
    assert main(["ncu-import", str(tp), str(DATA / "ncu_raw_nvtx.csv"), "-o", str(out_p)]) == 0
    assert "7 of 9 kernels joined" in capsys.readouterr().out
    assert load_trace(out_p)["ncu"]["nodes_matched"] == 3


def test_trace_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "t.json"
    p.write_text('{"format": "tracekit-trace", "version": 9}')
    assert main(["export", str(p), str(tmp_path / "o.json")]) == 2
    _one_error_line(capsys, "version 9 is newer")
    p.write_text(json.dumps(make_trace())[:-40])
    assert main(["diff", str(p), str(p)]) == 2
    _one_error_line(capsys, "not valid JSON (truncated?)")
    assert main(["ncu-import", str(tmp_path / "none.json"), "x.csv"]) == 2
    _one_error_line(capsys, "no such trace file")
    good = write_trace(make_trace(), tmp_path / "g.json")
    (tmp_path / "bad.csv").write_text("nothing here")
    assert main(["ncu-import", str(good), str(tmp_path / "bad.csv")]) == 2
    _one_error_line(capsys, "no Nsight Compute CSV header")


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["frobnicate"]) == 2
    assert main(["--help"]) == 0
    capsys.readouterr()


def test_python_dash_m(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "tracekit", "info", str(tmp_path / "x.gguf")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "tracekit", "--help"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0 and "record-trace" in r.stdout and "ncu-import" in r.stdout


def test_record_trace_ctrl_c_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import tracekit.runner.record as rec

    def interrupted(*a: object, **k: object) -> Path:
        raise rec.RecordInterrupted(tmp_path / "t.json", 3)

    monkeypatch.setattr(rec, "record_trace", interrupted)
    assert record_trace_main(["--no-progress", "-o", str(tmp_path / "t.json")]) == 130
    err = capsys.readouterr().err.strip()
    assert (
        err == f"interrupted: saved 3 complete step(s) to {tmp_path / 't.json'} (marked incomplete)"
    )


def test_bench_and_viz_are_dispatched(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["viz", "--help"]) == 0
    assert "trace" in capsys.readouterr().out
    assert main(["bench", "--help"]) == 0
    capsys.readouterr()


def test_record_trace_bad_ids_and_context(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t.json"
    assert record_trace_main(["--tokens", "1,999999", "--backend", "numpy", "-o", str(out)]) == 2
    _one_error_line(capsys, "token id 999999 at position 1 is out of range")
    assert record_trace_main(["--tokens", "1", "--steps", "100000", "-o", str(out)]) == 2
    _one_error_line(capsys, "more than the model's context")
    assert not out.exists()
