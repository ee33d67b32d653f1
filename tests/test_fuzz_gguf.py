"""A deterministic slice of the malformed-GGUF fuzz campaign (the full one: scripts/fuzz_gguf.py).

Every mutant must end in one `error: ...` line with exit code 2, or (a benign mutation) succeed
with valid output; never a traceback, a crash or a hang.
"""

from __future__ import annotations

import struct
from pathlib import Path

import gguf
import pytest

from tests.scripts import load_script

#: CI slice: mutant ids [0, CI_COUNT) of seed 0 on the small bases (SmolLM2 costs ~2 s a parse).
CI_COUNT = 200
CI_BASES = ("demo", "tiny", "gemma3")


fz = load_script("fuzz_gguf")


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return fz.prepare_bases(tmp_path_factory.mktemp("bases"), ["tiny", "gemma3"])


def test_layout_finds_every_field(bases: dict[str, Path]) -> None:
    lay = fz.read_layout(bases["tiny"])
    reader = gguf.GGUFReader(bases["tiny"])
    raw = bases["tiny"].read_bytes()
    assert lay.data_offset == reader.data_offset and lay.data_offset % 64 == 0
    assert len(lay.tensors) == len(reader.tensors)
    (kv,) = lay.sites["kv_count"]
    assert struct.unpack_from("<Q", raw, kv.offset)[0] == len(reader.fields) - 3
    for t, rt in zip(lay.tensors, reader.tensors, strict=True):
        assert t.name == rt.name
        assert struct.unpack_from("<I", raw, t.type_site.offset)[0] == int(rt.tensor_type)
        dims = [struct.unpack_from("<Q", raw, s.offset)[0] for s in t.dims_sites]
        assert dims == [int(d) for d in rt.shape]
        assert raw[t.name_site.offset : t.name_site.offset + t.name_site.size] == rt.name.encode()
        rel = struct.unpack_from("<Q", raw, t.offset_site.offset)[0]
        assert lay.data_offset + rel == rt.data_offset
    regions = lay.regions()
    assert regions["header"] == (0, 24)
    assert regions["metadata"][1] == regions["tensor_infos"][0] < regions["data"][0]


def test_mutants_are_deterministic_and_hit_their_fields(bases: dict[str, Path]) -> None:
    layouts = {k: fz.read_layout(p) for k, p in bases.items()}
    a = [fz.Mutator(layouts, 7).mutant(i).to_json() for i in range(300)]
    b = [fz.Mutator(layouts, 7).mutant(i).to_json() for i in range(300)]
    assert a == b
    assert a != [fz.Mutator(layouts, 8).mutant(i).to_json() for i in range(300)]
    families = {m["op"].split(":")[0] for m in a}
    assert {"truncate", "flip", "set_int", "tensor_type", "dims_overflow", "row_block"} <= families
    for m in a:
        lay = layouts[m["base"]]
        if m["op"].startswith("truncate:"):
            assert m["length"] is not None and m["length"] < lay.size
            region = m["op"].split(":")[1]
            lo, hi = lay.regions()[region]
            assert lo <= m["length"] < hi
        elif m["op"].startswith("tensor_type:unknown"):
            ((off, val),) = m["patches"]
            assert off in {t.type_site.offset for t in lay.tensors}
            assert struct.unpack("<I", bytes.fromhex(val))[0] not in set(
                int(t) for t in gguf.GGMLQuantizationType
            )


def test_materialize_applies_patches(tmp_path: Path, bases: dict[str, Path]) -> None:
    base = bases["tiny"]
    m = fz.Mutant(0, "tiny", "test", "", [(4, "ff"), (100, "0102")], 200)
    out = tmp_path / "m.gguf"
    assert fz.materialize(m, base, out) == 200
    raw, new = base.read_bytes(), out.read_bytes()
    assert len(new) == 200
    assert new[4] == 0xFF and new[100:102] == b"\x01\x02"
    assert new[:4] == raw[:4] and new[5:100] == raw[5:100] and new[102:] == raw[102:200]


def test_classify() -> None:
    assert fz.classify(2, "", "error: bad file\n", None, None) == "error"
    assert fz.classify(2, "", "  0%|   |\r\rerror: bad file\n", None, None) == "error"
    assert fz.classify(2, "", "error: IndexError: index 0\n", None, None) == "error-untyped"
    assert fz.classify(2, "", "error: a\nerror: b\n", None, None) == "bad-error"
    assert fz.classify(1, "", "error: a\n", None, None) == "bad-error"
    assert fz.classify(0, "ok", "", None, True) == "success"
    assert fz.classify(0, "ok", "", None, False) == "bad-output"
    assert fz.classify(2, "", "Traceback (most recent call last):\n", None, None) == "traceback"
    assert fz.classify(-1, "", "", "Traceback ...", None) == "traceback"


def test_harness_catches_hang_crash_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The harness itself must be able to fail: inject each failure kind into a worker.
    monkeypatch.setenv("FUZZ_GGUF_INJECT", "0:hang,1:crash,2:raise,3:lines")
    out = fz.run_campaign(
        4, seed=0, jobs=2, bases=("tiny",), timeout=2.0, work=tmp_path, mem_limit_gb=0
    )
    got = {r["id"]: r["outcome"] for r in out["results"]}
    assert got == {0: "hang", 1: "crash", 2: "traceback", 3: "bad-error"}
    assert out["summary"]["retried_after_timeout"] == {0: "hang"}  # a hang is confirmed once
    tb = out["results"][2]["runs"]["info"]["traceback"]
    assert tb[-1] == "RuntimeError: injected failure"
    assert any("time.sleep" in ln or "_call_injected" in ln for ln in out["results"][0]["log_tail"])


@pytest.mark.slow
def test_fuzz_slice(tmp_path: Path) -> None:
    pytest.importorskip("tracekit.cli")
    # 10 s per command (a hang is retried once with 2x): a benign record-trace of these bases
    # takes well under 2 s.
    out = fz.run_campaign(
        CI_COUNT, seed=0, jobs=2, bases=CI_BASES, timeout=10.0, work=tmp_path, retry_factor=2.0
    )
    summary = out["summary"]
    assert summary["mutants"] == CI_COUNT
    bad = [r for r in out["results"] if r["outcome"] in fz.FAILURES]
    report = "\n".join(f"{r['id']} {r['op']}: {fz._signature(r)}" for r in bad[:10])
    assert not bad, f"{len(bad)} of {CI_COUNT} mutants failed:\n{report}"
    # Both verdicts occur: the slice exercises rejection and benign mutations alike.
    assert summary["outcomes"].get("error", 0) > CI_COUNT // 2
    assert summary["outcomes"].get("success", 0) >= 5
    assert len(summary["by_family"]) == len(fz.FAMILIES)


# -- the defect the full campaign found (fixed in fe7ede0), as minimal files --------------------
REGRESSIONS = [
    # seed 0, mutants 219 and 1773: a numeric array's count far beyond the file. gguf-py's
    # reader got an empty view past the end and looped 2^63 times.
    ("tokenizer.ggml.scores item count", "<Q", 2**63 - 1),
    ("tokenizer.ggml.token_type item count", "<Q", 2**32 - 1),
    # seed 0, mutant 2949: a string value retyped as an array reads its bytes as a count.
    ("general.architecture value type", "<I", int(gguf.GGUFValueType.ARRAY)),
    # seed 0, mutant 3896: an array of strings retyped as an array of arrays.
    ("tokenizer.ggml.tokens item type", "<I", int(gguf.GGUFValueType.ARRAY)),
    # String items read a length first, so this one always stopped at the file end.
    ("tokenizer.ggml.tokens item count", "<Q", 2**64 - 1),
]


def test_counts_beyond_the_file_are_refused(tmp_path: Path, bases: dict[str, Path]) -> None:
    pytest.importorskip("tracekit.cli")
    lay = fz.read_layout(bases["tiny"])
    sites = {s.label: s for kind in lay.sites.values() for s in kind}
    mutants = [
        fz.Mutant(i, "tiny", "regression", label, [(sites[label].offset, struct.pack(f, v).hex())])
        for i, (label, f, v) in enumerate(REGRESSIONS)
    ]
    out = fz.run_campaign(
        0, 0, 2, ("tiny",), timeout=5.0, work=tmp_path, mutants=mutants, retry_factor=0
    )
    for res in out["results"]:
        label = REGRESSIONS[res["id"]][0]
        assert res["outcome"] == "error", f"{label}: {fz._signature(res)}"
        assert "not a readable GGUF file" in res["runs"]["info"]["stderr"][0], label
