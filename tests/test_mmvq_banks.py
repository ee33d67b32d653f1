"""scripts/mmvq_banks.py's count of mmvq_st's shared-memory wavefronts (no GPU): the words a
warp's loads read and the banks they fall in, plain lane order against MMVQ_PAIRED_BLOCKS'."""

from __future__ import annotations

from tests.scripts import load_script
from tracekit.quants import quant_type


def test_a_bank_holding_two_words_costs_two_wavefronts_and_a_broadcast_one() -> None:
    mod = load_script("mmvq_banks")
    assert mod.wavefronts(list(range(32))) == 1
    assert mod.wavefronts([0, 32, 64, 1]) == 3  # bank 0 holds three words
    assert mod.wavefronts([5] * 32) == 1  # one word for every lane: a broadcast
    assert mod.wavefronts([None] * 32) == 0  # predicated off on every lane


def test_ld16_a2_reads_a_fifth_word_only_off_the_4_byte_grid() -> None:
    mod = load_script("mmvq_banks")
    assert mod.block_loads([("a2", 2, 16)], 0) == [0, 1, 2, 3, 4]  # bytes 2..17: words 0-4
    assert mod.block_loads([("a2", 2, 16)], 18) == [5, 6, 7, 8, None]  # bytes 20..35


def test_pairs_of_blocks_halve_the_two_byte_aligned_types_wavefronts() -> None:
    """Lanes on consecutive 18-, 22- or 34-byte blocks put two words in some bank (2 wavefronts
    a load); on every other block (an odd number of words apart) each word has its own bank.
    Q4_1's 20-byte blocks are 5 words apart: conflict-free already, and pairing would double
    them, which is why LaneBlocks pairs only blocks of TS = 2 mod 4."""
    mod = load_script("mmvq_banks")
    for name in mod.LOADS:
        assert mod.SIZES[name] == quant_type(name.split()[0]).type_size
    plain = lambda lane, j: lane + 32 * j  # noqa: E731
    paired = lambda lane, j: 2 * lane + j % 2 + 64 * (j // 2)  # noqa: E731
    for name in ("Q4_0", "IQ4_NL", "Q5_0", "Q5_0 (window)", "Q8_0"):
        assert mod.item_wavefronts(name, paired) * 2 == mod.item_wavefronts(name, plain)
    assert mod.item_wavefronts("Q4_0", paired) == 5.5  # 5 loads, the fifth on half the items
    assert mod.item_wavefronts("Q4_1", plain) == 5.0
    assert mod.item_wavefronts("Q4_1", paired) == 10.0
