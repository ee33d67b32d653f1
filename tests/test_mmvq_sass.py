"""scripts/mmvq_sass.py's reading of a disassembly (no nvcc needed): the row loop it counts and
the longest chain of dependent DP4A in it, on SASS lines as cuobjdump prints them."""

from __future__ import annotations

from tests.scripts import load_script


def _sass(*lines: str) -> str:
    return "\n".join(
        f"        /*{16 * i:04x}*/                   {t} ;" for i, t in enumerate(lines)
    )


def test_the_row_loop_is_the_smallest_backward_loop_with_a_dp4a() -> None:
    sass = _sass(
        "MOV R1, c[0x0][0x28]",  # 0x00
        "LDS R4, [R2]",  # 0x10: the outer loop's head
        "IDP.4A.S8.S8 R6, R4, R5, RZ",  # 0x20: the inner loop's head
        "IADD3 R2, R2, 0x4, RZ",  # 0x30
        "@!P0 BRA 0x20",  # 0x40: the inner loop
        "FADD R7, R7, R6",  # 0x50
        "@!P1 BRA 0x10",  # 0x60: the outer loop
        "LOP3.LUT R8, R8, 0xf, RZ, 0xc0, !PT",  # 0x70
        "@!P2 BRA 0x70",  # 0x80: a loop with no DP4A
        "EXIT",
    )
    mod = load_script("mmvq_sass")
    assert [t.strip() for t in mod.row_loop(sass)] == ["IDP.4A.S8.S8 R6, R4, R5, RZ", "IADD3 R2, R2, 0x4, RZ",
                                  "@!P0 BRA 0x20"]  # fmt: skip


def test_the_dp4a_chain_follows_accumulators_and_ends_at_an_overwrite() -> None:
    mod = load_script("mmvq_sass")
    one_chain = [f"IDP.4A.S8.S8 R4, R{10 + i}, R{20 + i}, {'RZ' if i == 0 else 'R4'}"
                 for i in range(8)]  # fmt: skip
    assert mod.dp4a_chain(one_chain) == 8
    two_chains = [
        "IDP.4A.S8.S8 R4, R10, R20, RZ", "IDP.4A.S8.S8 R5, R12, R22, RZ",
        "IDP.4A.S8.S8 R4, R11, R21, R4", "IDP.4A.S8.S8 R5, R13, R23, R5",
        "IMAD.IADD R4, R4, 0x1, R5",  # the chains meet: an add, not a DP4A, ends them
        "IDP.4A.S8.S8 R6, R14, R24, R4",
    ]  # fmt: skip
    assert mod.dp4a_chain(two_chains) == 2
    # a register rewritten between two DP4A breaks the chain through it (predicated too)
    broken = ["IDP.4A.S8.S8 R4, R10, R20, RZ", "@P0 MOV R4, RZ", "IDP.4A.S8.S8 R4, R11, R21, R4"]
    assert mod.dp4a_chain(broken) == 1
    assert mod.dp4a_chain(["IDP.2A.LO.S16.S8 R4, R10, R20, R4"]) == 1
    assert mod.dp4a_chain(["LDS R4, [R2]", "FADD R7, R7, R6"]) == 0


def test_the_held_section_runs_from_the_rows_first_shared_load_to_its_sum() -> None:
    """MMVQ_ST_XREG's held items: straight-line code in the row loop, before the row's warp sum
    (its first SHFL.BFLY), not counting the loop of later items nested in the row loop."""
    sass = _sass(
        "BAR.SYNC.DEFER_BLOCKING 0x0",  # 0x00
        "IMAD R2, R3, 0x12, R4",  # 0x10: the row loop's head (row setup)
        "LDS R6, [R2]",  # 0x20: the held items
        "IDP.4A.S8.S8 R7, R6, R8, RZ",  # 0x30
        "LDS R9, [R2+0x12]",  # 0x40: the later items' loop
        "IDP.4A.S8.S8 R7, R9, R10, R7",  # 0x50
        "@P0 BRA 0x40",  # 0x60
        "SHFL.BFLY PT, R11, R7, 0x10, 0x1f",  # 0x70: the row's sum
        "FADD R7, R7, R11",  # 0x80
        "@P1 BRA 0x10",  # 0x90: the row loop
        "EXIT",
    )
    mod = load_script("mmvq_sass")
    assert [t.strip() for t in mod.held_section(sass)] == [
        "LDS R6, [R2]",
        "IDP.4A.S8.S8 R7, R6, R8, RZ",
    ]
    assert mod.held_section(_sass("LDS R6, [R2]", "EXIT")) == []  # no row sum: nothing held
