"""The quant declarations (tracekit/quants.py): every declared type has every piece, and every
consumer (CPU dispatch, dequant/embed instantiations, block sizes, the stamp list) is derived
from the one table, so nothing lists the types a second time.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import IQ4_NL as GGUF_IQ4_NL

import tracekit.kernels.embed  # noqa: F401 (registers embed.cu's generated instantiations)
from tracekit import quants
from tracekit.kernels import cuda, dequant
from tracekit.quants import QUANT_TABLE, QUANTIZED_TYPES, QuantType, quant_type

KERNELS = Path(cuda.__file__).resolve().parent
HEADER = (KERNELS / "quant_decoders.cuh").read_text()
TYPES = list(QUANT_TABLE.values())
IDS = [t.name for t in TYPES]
DEC8 = "static __device__ __forceinline__ void dec8(const u8* b, int c, float* v)"


def _struct_body(name: str) -> str:
    """The text of ``struct <name> { ... };`` in the decoder header."""
    m = re.search(rf"^struct {name} \{{(.*?)^\}};", HEADER, re.S | re.M)
    assert m, f"no `struct {name} {{` in quant_decoders.cuh"
    return m.group(1)


@pytest.mark.parametrize("qt", TYPES, ids=IDS)
def test_declaration_has_every_piece(qt: QuantType) -> None:
    assert type(qt).__name__ == qt.name == qt.qtype.name
    assert (qt.block_size, qt.type_size) == GGML_QUANT_SIZES[qt.qtype]
    assert quant_type(qt.name) is qt and quant_type(qt.qtype) is qt
    # the CPU decoder is the type's own
    assert type(qt).decode is not QuantType.decode, f"{qt.name} declares no decode"
    # the drawing: its headline gives the sizes, its ruler ends at the block's last byte and
    # marks every f16 field's offset
    head = qt.layout.strip().splitlines()[0]
    values = "1 value" if qt.block_size == 1 else f"{qt.block_size} values"
    assert head.startswith(f"{qt.name}: {values} in {qt.type_size} bytes"), head
    rulers = [ln for ln in qt.layout.splitlines() if re.fullmatch(r"\s*0(\s+\d+)+\s*", ln)]
    assert rulers, f"{qt.name}'s drawing has no byte ruler"
    marks = [int(x) for x in rulers[0].split()]
    assert marks[-1] == qt.type_size and marks == sorted(marks), marks
    for off in qt.f16_fields:
        assert off in marks and off + 2 <= qt.type_size, (qt.name, off)
    # the one CUDA decoder, its sizes from the declaration, the matmul engineers' interface
    body = _struct_body(qt.device)
    if qt.is_quantized:
        assert qt.device == qt.name
        assert f"QUANT_SIZES({qt.name});" in body
        assert DEC8 in body, f"struct {qt.name} has no dec8 with the shared signature"
        assert qt.dequant is not None and qt.dequant.variant in dequant.VARIANTS
        # the integer view the q8 matvec reads: NumPy's int_parts, CUDA's Codes<T>
        assert type(qt).int_parts is not QuantType.int_parts, f"{qt.name} declares no int_parts"
        codes = (KERNELS / "quant_codes.cuh").read_text()
        # a scale group of 32 really shares its factors (mmvq scales its sum once)
        rng = np.random.default_rng(5)
        blocks = rng.integers(0, 256, (64, qt.type_size), dtype=np.uint8)
        with np.errstate(all="ignore"):
            p = qt.int_parts(blocks)
        per = qt.scale_group // 16
        for f in (p.a, p.b) if p.b is not None else (p.a,):
            g = f.reshape(64, -1, per).view(np.uint32)
            assert (g == g[:, :, :1]).all(), f"{qt.name}'s factors differ inside a scale group"
        assert re.search(rf"^struct Codes<{qt.name}>( : [^{{]+)? \{{", codes, re.M), qt.name
    else:
        assert "vec8" in body and "at(" in body


@pytest.mark.parametrize("qt", TYPES, ids=IDS)
def test_kernels_are_generated_from_the_declaration(qt: QuantType) -> None:
    dq, em = cuda.source("dequant"), cuda.source("embed")
    if qt.is_quantized:
        c = dequant.CONFIG[qt.qtype]
        args = f"{qt.dequant_kernel}, {qt.name}, {c.variant}, {c.chunks}, {dequant.steps(qt)}"
        line = f"DEQUANT_KERNEL({args})"
        assert re.search(rf"^{re.escape(line)}$", dq, re.M), line
        assert re.search(rf"^EMBED_KERNEL\({qt.embed_kernel}, {qt.name}\)$", em, re.M)
        assert f"-DTK_{qt.name}_QK={qt.block_size}" in cuda._OPTIONS
        assert f"-DTK_{qt.name}_TS={qt.type_size}" in cuda._OPTIONS
    else:
        assert f"FLOAT_DEQUANT_KERNEL({qt.dequant_kernel}, {qt.device})" in dq
    assert qt.embed_kernel in cuda.STAMPED


def test_no_source_lists_the_types() -> None:
    # the .cu files hold templates and macros; the list of what to build is generated
    for cu in KERNELS.glob("*.cu"):
        src = cu.read_text()
        used = re.findall(r"^(?:FLOAT_)?(?:DEQUANT|EMBED)_KERNEL\(", src, re.M)
        assert not used, f"{cu.name} instantiates types itself"
    assert not re.search(r"DQ_[VC]_", (KERNELS / "dequant.cu").read_text())
    # no Python module but quants.py spells a kernel of a particular quant type
    root = Path(quants.__file__).parent
    for py in root.rglob("*.py"):
        if py.name == "quants.py":
            continue
        text = py.read_text()
        for t in QUANTIZED_TYPES:
            for name in (t.dequant_kernel, t.embed_kernel):
                assert name not in text, f"{py.relative_to(root)} names {name}"


def test_header_sizes_only_come_from_python() -> None:
    assert not re.search(r"QK\s*=\s*\d", HEADER), "a block size typed in the header"
    assert "#error" in HEADER.split("#define QUANT_SIZES")[0]  # compiled without them: an error
    structs = set(re.findall(r"^struct (\w+) \{", HEADER, re.M))
    declared = {t.device for t in TYPES}
    assert {t.name for t in QUANTIZED_TYPES} <= structs
    # every quant struct of the header is declared (no decoder without a declaration)
    quant_structs = {s for s in structs if re.search(rf"QUANT_SIZES\({s}\)", HEADER)}
    assert quant_structs <= declared, quant_structs - declared


def test_iq4_levels_in_the_header_are_gguf_py_s() -> None:
    words = re.findall(r"^#define IQ4_LEVELS_(\d) (0x[0-9A-F]+)u", HEADER, re.M)
    assert [i for i, _ in words] == ["0", "1", "2", "3"]
    got = b"".join(int(w, 16).to_bytes(4, "little") for _, w in words)
    want = np.array(GGUF_IQ4_NL.kvalues, np.int8).tobytes()
    assert got == want
    np.testing.assert_array_equal(quants._IQ4_LEVELS, np.array(GGUF_IQ4_NL.kvalues, np.float32))


def test_a_misnamed_or_repeated_declaration_is_refused() -> None:
    with pytest.raises(TypeError, match="must be named as GGML names it: IQ2_XXS"):

        class TwoBit(QuantType, qtype=GGMLQuantizationType.IQ2_XXS):
            pass

    with pytest.raises(TypeError, match="Q4_0 is declared twice"):

        class Q4_0(QuantType, qtype=GGMLQuantizationType.Q4_0):  # noqa: N801
            pass

    assert GGMLQuantizationType.IQ2_XXS not in QUANT_TABLE
    assert type(QUANT_TABLE[GGMLQuantizationType.Q4_0]) is quants.Q4_0


def test_unknown_and_unsupported_types_name_the_supported_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown tensor type 'Q9_9'; supported: F32, .*IQ4_XS"):
        quant_type("Q9_9")
    with pytest.raises(ValueError, match="tensor type IQ2_XXS is not supported"):
        quant_type(GGMLQuantizationType.IQ2_XXS)
    with pytest.raises(TypeError, match="not int"):
        quant_type(2)  # type: ignore[arg-type]


def test_sizes_and_row_bytes() -> None:
    q3 = quant_type("Q3_K")
    assert q3.row_bytes(512) == 220 and q3.nbytes((3, 256)) == 330
    with pytest.raises(ValueError, match="row length 100 is not a multiple of IQ4_XS block size"):
        quant_type("IQ4_XS").row_bytes(100)
    assert {"Q2_K", "Q3_K", "IQ4_NL", "IQ4_XS"} <= {t.name for t in QUANTIZED_TYPES}


@pytest.mark.parametrize("qt", TYPES, ids=IDS)
def test_drawing_is_a_box_with_offsets_under_its_edges(qt: QuantType) -> None:
    lines = [ln.strip() for ln in qt.layout.splitlines()]
    box = [ln for ln in lines if ln and ln[0] in "+|"]
    assert box and len({len(ln) for ln in box}) == 1, f"{qt.name}: ragged box"
    edges = [i for i, ch in enumerate(box[0]) if ch == "+"]
    ruler = next(ln for ln in lines if re.fullmatch(r"0(\s+\d+)+", ln))
    starts = [m.start() for m in re.finditer(r"\d+", ruler)]
    assert starts == edges, f"{qt.name}: offsets {ruler!r} are not under the edges {box[0]!r}"
