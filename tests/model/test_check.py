"""tracekit check: bad blocks planted in a copy of a real GGUF file are named at the right block."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as T

from tests.model.test_config import smollm2_path
from tracekit.cli import main
from tracekit.model.check import SCALE_FIELDS, check_model
from tracekit.model.demo import write_demo_model
from tracekit.model.synthetic import write_synthetic_model
from tracekit.quants import QUANTIZED_TYPES

SMOL = smollm2_path()


def _tensor(path: Path, name: str) -> gguf.ReaderTensor:
    return next(t for t in gguf.GGUFReader(path).tensors if t.name == name)


def _quantized(path: Path) -> list[gguf.ReaderTensor]:
    return [t for t in gguf.GGUFReader(path).tensors if t.tensor_type in SCALE_FIELDS]


def _poke(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if SMOL is not None:
        return SMOL
    return write_demo_model(tmp_path_factory.mktemp("chk") / "demo.gguf")  # pragma: no cover


def test_a_clean_file_passes(real: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = check_model(real)
    assert not r.found and r.first_bad is None and r.metadata_problems == []
    assert all(t.scanned for t in r.tensors)  # every type of the file has a layout
    assert len(r.tensors) == len(gguf.GGUFReader(real).tensors)
    assert main(["check", str(real)]) == 0
    assert "verdict: no problems found" in capsys.readouterr().out


def test_inf_scale_and_zero_block_are_named(
    real: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.gguf"
    shutil.copyfile(real, bad)
    qs = _quantized(bad)
    t_inf, t_zero = qs[3], qs[-2]  # two different quantized tensors
    block_inf, block_zero = 1234 % (t_inf.n_bytes // GGML_QUANT_SIZES[t_inf.tensor_type][1]), 77
    bsize = GGML_QUANT_SIZES[t_inf.tensor_type]
    d_off = SCALE_FIELDS[t_inf.tensor_type][0]
    inf_at = int(t_inf.data_offset) + block_inf * bsize[1] + d_off
    _poke(bad, inf_at, np.float16(np.inf).tobytes())
    zsize = GGML_QUANT_SIZES[t_zero.tensor_type][1]
    zero_at = int(t_zero.data_offset) + block_zero * zsize
    _poke(bad, zero_at, bytes(zsize))

    r = check_model(bad)
    assert r.found
    by = {t.name: t for t in r.tensors}
    ti, tz = by[t_inf.name], by[t_zero.name]
    assert (ti.nonfinite, ti.zero_blocks, tz.nonfinite, tz.zero_blocks) == (1, 0, 0, 1)
    assert ti.first_bad.kind == "non-finite scale" and ti.first_bad.block == block_inf
    assert ti.first_bad.byte_offset == inf_at - d_off
    row_len = int(t_inf.shape[0])  # gguf order: ne0 is the row
    assert ti.first_bad.row == block_inf // (row_len // bsize[0])
    assert tz.first_bad.kind == "all-zero block" and tz.first_bad.block == block_zero
    assert tz.first_bad.byte_offset == zero_at
    assert r.first_bad == ti.first_bad  # the first in file order
    assert sum(t.nonfinite + t.zero_blocks for t in r.tensors) == 2

    assert main(["check", str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"first bad block: {t_inf.name}: non-finite scale at block {block_inf}" in out
    assert main(["check", "--json", str(bad)]) == 1
    j = json.loads(capsys.readouterr().out)
    assert j["found"] and j["first_bad"]["block"] == block_inf
    assert j["first_bad"]["byte_offset"] == inf_at - d_off


def test_nan_in_a_float_tensor(real: Path, tmp_path: Path) -> None:
    bad = tmp_path / "nan.gguf"
    shutil.copyfile(real, bad)
    t = next(t for t in gguf.GGUFReader(bad).tensors if t.tensor_type == T.F32)
    _poke(bad, int(t.data_offset) + 4 * 5, np.float32(np.nan).tobytes())
    r = check_model(bad)
    (tc,) = [x for x in r.tensors if x.nonfinite]
    assert tc.name == t.name and tc.first_bad.block == 5 and tc.first_bad.kind == "non-finite value"


@pytest.mark.parametrize("qt", [t.qtype for t in QUANTIZED_TYPES], ids=lambda q: q.name)
def test_scale_offsets_per_type(tmp_path: Path, qt: T) -> None:
    """The table's offset of ``d`` for each type: an Inf written there is found, and a NaN in
    the quants' bytes right after the scale fields is not a scale (no false finding)."""
    path = write_synthetic_model(tmp_path / "m.gguf", "llama", seed=2, types={"ffn_down": qt})
    t = _tensor(path, "blk.0.ffn_down.weight")
    assert t.tensor_type == qt
    size = GGML_QUANT_SIZES[qt][1]
    assert check_model(path).found is False
    b = 3
    _poke(path, int(t.data_offset) + b * size + SCALE_FIELDS[qt][-1], b"\x00\x7e")  # f16 NaN
    r = check_model(path)
    (tc,) = [x for x in r.tensors if x.nonfinite]
    assert tc.name == t.name and tc.first_bad.block == b and tc.nonfinite == 1


def test_unknown_type_is_not_scanned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_demo_model(tmp_path / "demo.gguf")
    from tracekit.model import check

    table = dict(check.SCALE_FIELDS)
    del table[T.Q6_K]
    monkeypatch.setattr(check, "SCALE_FIELDS", table)
    r = check.check_model(path)
    skipped = [t for t in r.tensors if not t.scanned]
    assert skipped and all(t.type == "Q6_K" for t in skipped)
    assert "not scanned: " in r.text() and not r.found


def test_shape_against_metadata(tmp_path: Path) -> None:
    from tests.model.test_config import rewrite

    src = write_demo_model(tmp_path / "demo.gguf")
    dst = rewrite(
        src,
        tmp_path / "wrong.gguf",
        meta={"qwen2.feed_forward_length": (384, gguf.GGUFValueType.UINT32)},
    )
    r = check_model(dst)
    assert r.found and any("expected" in p and "ffn_" in p for p in r.metadata_problems)


def test_unreadable_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_demo_model(tmp_path / "demo.gguf")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(src.read_bytes()[:5000])
    assert main(["check", str(cut)]) == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert main(["check", str(tmp_path / "none.gguf")]) == 2
