"""Shared-memory wavefronts of mmvq_st's weight reads, counted without a GPU: for every quant
type, the shared-memory loads of one item as Codes<T> (quant_codes.cuh) reads it, at a warp's
32 lanes, in the plain lane order (lane l: sub-item l % ITEMS of block l / ITEMS + 32 j /
ITEMS) and in MMVQ_PAIRED_BLOCKS' at each group size G (matvec.cu's LaneBlocks: of each window
of two items' blocks, item 2m takes the even groups of G blocks, 2m + 1 the odd ones; with the
flip, the other way round for odd sub-items), against what the type declares
(Codes<T>::PAIR_G and PAIR_FLIP, read from quant_codes.cuh; G 0: none).

A load of W bytes a lane is served in phases of 128 / W lanes; a phase takes as many
wavefronts as the most distinct W-byte units any one bank group holds (one unit for several
lanes: a broadcast), and a load no lane of a phase runs (ld16_a2's fifth word at a 4-byte
aligned block) takes none there. x is held in registers (MMVQ_ST_XREG), so these are a held
item's reads; rows start 16-byte aligned (k = 4096).

    .venv/bin/python scripts/mmvq_banks.py
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tracekit.quants import QUANTIZED_TYPES  # noqa: E402

CODES = Path(__file__).resolve().parents[1] / "tracekit" / "kernels" / "quant_codes.cuh"
Load = tuple[int, "int | None"]  # (bytes a lane, address; None: predicated off)


def _words(a: int, n: int) -> list[Load]:
    """n bytes at the 2-byte aligned a by aligned words (ld_4, ld16_a2, ld32_a2): the last one
    only where a is not 4-byte aligned."""
    w0 = a - a % 4
    return [(4, w0 + 4 * i) for i in range(n // 4)] + [(4, w0 + n if a % 4 else None)]


def _word(a: int) -> Load:  # an f16 or a byte: the word holding it
    return (4, a - a % 4)


def _q3_k(p: int, h: int) -> list[Load]:
    q4 = p % 4
    sw = p + 96 - q4  # scales and d as the aligned words holding them
    tail = [(4, sw + 12 if q4 else None), (4, None if q4 else p + 108)]
    return _words(p + 32 + 32 * h, 32) + _words(p, 32) + [(4, sw), (4, sw + 4), (4, sw + 8)] + tail


def _q6_k(p: int, i: int) -> list[Load]:
    h, u = i // 4, i % 4
    scales = [_word(p + 192 + (128 * h + 64 * g + 16 * u) // 16) for g in range(2)]
    return _words(p + 64 * h + 16 * u, 16) + _words(p + 128 + 32 * h + 16 * (u % 2), 16) + [
        _word(p + 208), *scales]  # fmt: skip


# Codes<T>::load's reads of sub-item s of the block at byte p.
LOADS: dict[str, Callable[[int, int], list[Load]]] = {
    "Q8_0": lambda p, s: [_word(p), *_words(p + 2, 16), *_words(p + 18, 16)],
    "Q4_0": lambda p, s: [_word(p), *_words(p + 2, 16)],
    "Q4_1": lambda p, s: [(4, p), *[(4, p + 4 + 4 * i) for i in range(4)]],
    "Q5_0": lambda p, s: [_word(p), *_words(p + 2, 4), *_words(p + 6, 16)],
    "Q5_1": lambda p, s: [(8, p), (8, p + 8), (8, p + 16)],
    "Q2_K": lambda p, h: (
        [(4, p + 16 + 32 * h + 4 * i) for i in range(8)]
        + [(4, p + 8 * h), (4, p + 8 * h + 4), (4, p + 80)]
    ),
    "Q3_K": _q3_k,
    "Q4_K": lambda p, r: [(16, p), (16, p + 16 + 32 * r), (16, p + 32 + 32 * r)],
    "Q5_K": lambda p, r: [
        (16, p),
        (16, p + 16),
        (16, p + 32),
        (16, p + 48 + 32 * r),
        (16, p + 64 + 32 * r),
    ],  # fmt: skip
    "Q6_K": _q6_k,
    "IQ4_NL": lambda p, s: [_word(p), *_words(p + 2, 16)],
    "IQ4_XS": lambda p, i: [(8, p), (8, p + 8 + 16 * i), (8, p + 16 + 16 * i)],
}
ITEMS = {"Q2_K": 2, "Q3_K": 2, "Q4_K": 4, "Q5_K": 4, "Q6_K": 8, "IQ4_XS": 8}  # else 1


def wavefronts(addrs: list[int | None], width: int) -> int:
    """One load's wavefronts: its lanes' addresses (None: off), width bytes each."""
    per = 128 // width  # lanes a phase
    total = 0
    for start in range(0, 32, per):
        groups: dict[int, set[int]] = {}
        for a in addrs[start : start + per]:
            if a is not None:
                groups.setdefault(a // width % per, set()).add(a // width)
        total += max((len(units) for units in groups.values()), default=0)
    return total


def block_of(b0: int, j: int, bstep: int, g: int, flip: bool = False, sub: int = 0) -> int:
    """LaneBlocks::at: the block of lane-block b0's item j (sub-item sub; g = 0: the plain
    order), in a row of whole windows."""
    if g == 0:
        return b0 + bstep * j
    odd = (j ^ (sub if flip else 0)) % 2
    return 2 * bstep * (j // 2) + b0 % g + 2 * g * (b0 // g) + g * odd


def item_wavefronts(name: str, ts: int, g: int, flip: bool = False, items: int = 4) -> float:
    """A warp's (one warp a row) wavefronts an item over its first `items` items."""
    per_block = ITEMS.get(name, 1)
    bstep = 32 // per_block
    total = 0
    for j in range(items):
        lanes = [LOADS[name](ts * block_of(lane // per_block, j, bstep, g, flip,
                                           lane % per_block), lane % per_block)
                 for lane in range(32)]  # fmt: skip
        for i, (width, _) in enumerate(lanes[0]):
            total += wavefronts([ln[i][1] for ln in lanes], width)
    return total / items


def declared_groups() -> dict[str, tuple[int, bool]]:
    """(Codes<T>::PAIR_G, PAIR_FLIP) as quant_codes.cuh declares them ((0, False) where not)."""
    text = CODES.read_text()
    out = {}
    for name in LOADS:
        m = re.search(rf"struct Codes<{name}>[^{{]*\{{(.*?)\n}};", text, re.S)
        assert m, f"no Codes<{name}> in {CODES.name}"
        g = re.search(r"PAIR_G = (\d+);", m[1])
        out[name] = (int(g[1]) if g else 0, "PAIR_FLIP = true;" in m[1])
    return out


def main() -> None:
    sizes = {t.name: t.type_size for t in QUANTIZED_TYPES}
    declared = declared_groups()
    print("| type | loads an item | plain | G = 1 | 2 | 4 | 8 | G = 1, flipped | declared G (flip) |"
          " its wavefronts |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in LOADS:
        bstep = 32 // ITEMS.get(name, 1)
        cells = [
            f"{item_wavefronts(name, sizes[name], g):.1f}" if bstep % g == 0 else "–"
            for g in (1, 2, 4, 8)
        ]
        g, flip = declared[name]
        flipped = item_wavefronts(name, sizes[name], 1, True)
        print(
            f"| {name} | {len(LOADS[name](0, 0))} | {item_wavefronts(name, sizes[name], 0):.1f} | "
            f"{' | '.join(cells)} | {flipped:.1f} | {g}{' (flip)' if flip else ''} | "
            f"{item_wavefronts(name, sizes[name], g, flip):.1f} |"
        )


if __name__ == "__main__":
    main()
