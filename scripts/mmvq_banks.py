"""Shared-memory wavefronts of mmvq_st's weight reads, counted without a GPU: for each type whose
item is one block (Codes<T>::load, quant_codes.cuh), the 32-bit words each of its shared-memory
loads reads, at a warp's 32 lanes, in the plain lane order (lane l: block l + 32 j) and in
MMVQ_PAIRED_BLOCKS' (matvec.cu's LaneBlocks: block 2 l + j % 2 + 64 (j / 2)). A load takes as
many wavefronts as the most distinct words any one of the 32 banks holds (same word: one
broadcast); a load no lane runs (ld16_a2's fifth word at a 4-byte aligned block) takes none.
x is held in registers (MMVQ_ST_XREG), so these are a held item's reads. The rows start
16-byte aligned (k = 4096 at these types).

    .venv/bin/python scripts/mmvq_banks.py
"""

from __future__ import annotations

# A type's loads of one block at byte address p, as Codes<T>::load reads it: ("u16", o) the f16
# at p + o (its word), ("a2", o, n) n bytes at the 2-byte aligned p + o by aligned words (one
# load a word, the last only where p + o is not 4-byte aligned: ld_4, ld16_a2), ("a4", o, n)
# n bytes of aligned words, ("win", n) MMVQ_Q5_0_WINDOW's n words (the last: a u16 where p is
# 4-byte aligned).
LOADS = {
    "Q4_0": [("u16", 0), ("a2", 2, 16)],
    "IQ4_NL": [("u16", 0), ("a2", 2, 16)],
    "Q5_0": [("u16", 0), ("a2", 2, 4), ("a2", 6, 16)],
    "Q5_0 (window)": [("win", 6)],
    "Q8_0": [("u16", 0), ("a2", 2, 16), ("a2", 18, 16)],
    "Q4_1": [("a4", 0, 4), ("a4", 4, 16)],
}
SIZES = {"Q4_0": 18, "IQ4_NL": 18, "Q5_0": 22, "Q5_0 (window)": 22, "Q8_0": 34, "Q4_1": 20}


def block_loads(loads: list[tuple], p: int) -> list[int | None]:
    """Each load's word index at block address p (None: the load is predicated off)."""
    words: list[int | None] = []
    for kind, *arg in loads:
        if kind == "u16":
            words.append((p + arg[0]) // 4)
        elif kind == "a4":
            words += [(p + arg[0]) // 4 + i for i in range(arg[1] // 4)]
        elif kind == "a2":
            a = p + arg[0]
            w0 = a // 4
            words += [w0 + i for i in range(arg[1] // 4)] + [w0 + arg[1] // 4 if a % 4 else None]
        else:  # win
            w0, n = p // 4, arg[0]
            words += [w0 + i for i in range(n - 1)] + [w0 + n - 1]  # (u16 or word: one word)
    return words


def wavefronts(words: list[int | None]) -> int:
    banks: dict[int, set[int]] = {}
    for w in words:
        if w is not None:
            banks.setdefault(w % 32, set()).add(w)
    return max((len(v) for v in banks.values()), default=0)


def item_wavefronts(name: str, block_of) -> float:
    """A warp's wavefronts an item, over its first 4 items (a 4096-value row's held ones)."""
    ts, loads = SIZES[name], LOADS[name]
    total = 0
    for j in range(4):
        lanes = [block_loads(loads, ts * block_of(lane, j)) for lane in range(32)]
        total += sum(wavefronts([ln[i] for ln in lanes]) for i in range(len(lanes[0])))
    return total / 4


def main() -> None:
    print("| type | loads an item | wavefronts an item, plain | paired |")
    print("|---|---|---|---|")
    for name in LOADS:
        plain = item_wavefronts(name, lambda lane, j: lane + 32 * j)
        paired = item_wavefronts(name, lambda lane, j: 2 * lane + j % 2 + 64 * (j // 2))
        n = len(block_loads(LOADS[name], 0))
        print(f"| {name} | {n} | {plain:.1f} | {paired:.1f} |")


if __name__ == "__main__":
    main()
