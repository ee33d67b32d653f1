"""scripts/mmvq_banks.py's count of mmvq_st's shared-memory wavefronts (no GPU): the words a
warp's loads read and the banks they fall in, in the plain lane order and MMVQ_PAIRED_BLOCKS',
and the group size each type declares (Codes<T>::PAIR_G) against that count."""

from __future__ import annotations

from tests.scripts import load_script
from tracekit.quants import QUANTIZED_TYPES


def test_a_bank_holding_two_units_costs_two_wavefronts_and_a_broadcast_one() -> None:
    mod = load_script("mmvq_banks")
    assert mod.wavefronts([4 * i for i in range(32)], 4) == 1
    assert mod.wavefronts([0, 128, 256, 4] + [None] * 28, 4) == 3  # bank 0: three words
    assert mod.wavefronts([20] * 32, 4) == 1  # one word for every lane: a broadcast
    assert mod.wavefronts([None] * 32, 4) == 0  # predicated off on every lane
    # 16-byte loads: 4 phases of 8 lanes; 8 consecutive 16-byte units a phase: one each
    assert mod.wavefronts([16 * i for i in range(32)], 16) == 4
    assert mod.wavefronts([128 * i for i in range(32)], 16) == 32  # one bank group, 8 units
    assert mod.wavefronts([8 * i for i in range(32)], 8) == 2  # 2 phases of 16 lanes


def test_ld16_a2_reads_a_fifth_word_only_off_the_4_byte_grid() -> None:
    mod = load_script("mmvq_banks")
    assert mod.LOADS["Q4_0"](0, 0) == [(4, 0), (4, 0), (4, 4), (4, 8), (4, 12), (4, 16)]
    assert mod.LOADS["Q4_0"](18, 0) == [(4, 16), (4, 20), (4, 24), (4, 28), (4, 32), (4, None)]


def test_the_groups_deal_each_window_once() -> None:
    """LaneBlocks::at's order, as the script has it: a window of two items' blocks, each block
    once a sub-item, every group size that divides a half, flipped or not."""
    mod = load_script("mmvq_banks")
    for bstep, g, flip in ((32, 1, False), (16, 8, False), (16, 1, True), (4, 1, False),
                           (64, 8, True)):  # fmt: skip
        for sub in (0, 1):
            got = sorted(mod.block_of(b0, j, bstep, g, flip, sub)
                         for b0 in range(bstep) for j in (2, 3))  # fmt: skip
            assert got == list(range(2 * bstep, 4 * bstep))
    # flipped: an odd sub-item's item 2m takes the block its even neighbour's 2m + 1 takes
    assert mod.block_of(3, 0, 16, 1, True, 1) == mod.block_of(3, 1, 16, 1, True, 0) == 7


def test_each_type_declares_the_group_size_with_the_fewest_wavefronts() -> None:
    """Codes<T>::PAIR_G and PAIR_FLIP are the order (plain, or a group size, flipped or not)
    whose loads take the fewest wavefronts: the plain order where it ties, then the smaller
    group, then no flip; and where a type declares one, its item's loads take fewer than in
    the plain order: about half for the blocks of TS = 2 mod 4, 21 -> 11 for Q2_K."""
    mod = load_script("mmvq_banks")
    declared = mod.declared_groups()
    assert set(declared) == {t.name for t in QUANTIZED_TYPES}
    for t in QUANTIZED_TYPES:
        bstep = 32 // mod.ITEMS.get(t.name, 1)
        orders = [(0, False)] + [(g, f) for g in (1, 2, 4, 8) if bstep % g == 0
                                 for f in (False, True)]  # fmt: skip
        counts = {o: mod.item_wavefronts(t.name, t.type_size, *o) for o in orders}
        best = min(counts.values())
        assert declared[t.name] == next(o for o in orders if counts[o] == best), (t.name, counts)
    assert {n for n, (g, _) in declared.items() if g} == {
        "Q8_0", "Q4_0", "Q5_0", "IQ4_NL", "Q2_K", "Q3_K", "Q6_K"}  # fmt: skip
    assert mod.item_wavefronts("Q4_0", 18, 1) * 2 == mod.item_wavefronts("Q4_0", 18, 0) == 11
    assert mod.item_wavefronts("Q2_K", 84, *declared["Q2_K"]) == 11  # one a load
