"""Static cost of the quant path's matvec (``mmvq_<type>_n1``) per type, without a GPU: the
kernel compiled with nvcc for sm_90 as matvec.py compiles it (its MMVQ_* defaults), disassembled
with cuobjdump, and its row loop (the smallest loop holding the DP4A) counted: SASS instructions
per iteration, the values and GGUF bytes an iteration consumes, instructions per weight byte.
On the H200 the issue-bound types ran at about 280 / (instructions per byte) % of copy
(BENCHMARKS.md, 2026-12-01), so this is the number a change to Codes<T> or the loop moves.

    .venv/bin/python scripts/mmvq_sass.py [TYPE,...] [--mix] [--unroll N] [--staged]
                                          [--rpw R] [--define -DNAME=V ...]
                                                      (--mix: each loop's opcodes;
                                                       needs nvcc, cuobjdump, nvdisasm on PATH;
                                                       pip's nvidia-cuda-cuobjdump/-nvdisasm do)

--staged counts mmvq_st_<type>_n1's item loop instead (compiled as matvec.py compiles the staged
module); --rpw R: R rows a warp walks together (mmvq's MMVQ_RPW, mmvq_st's MMVQ_ST_RPW: the loop
then holds R rows' items, and its bytes are theirs); --define adds a compile-time knob (e.g.
-DMMVQ_ST_XREG=0). With MMVQ_ST_XREG=V (the type's declaration, or a --define's), the items
whose x a lane holds are straight-line code before that loop, which then counts only a longer
row's later items: the last columns count the held ones, held_section). Each row also gives the
loop's longest chain of dependent DP4A (IDP whose accumulator is the previous IDP's result: a
latency an item pays whatever the issue rate) and the kernel's registers.
"""

from __future__ import annotations

import collections
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tracekit.kernels import matvec  # noqa: E402
from tracekit.quants import QUANTIZED_TYPES, quant_type  # noqa: E402

# DP4A a type's dot products take for 4 values: 1, but Q3_K's integer path (Codes<Q3_K>::dot)
# dots the two low bits and the third in two chains, and the IQ4s' levels are two addends
# (Codes<IQ4_*>::load_split)
DP4A_PER_4_VALUES = {"Q3_K": 2, "IQ4_NL": 2, "IQ4_XS": 2}
_INS = re.compile(r"\s+/\*([0-9a-f]{4})\*/\s+(.*?);")
_BACK = re.compile(r"BRA\s+(?:\S+,\s*)?0x([0-9a-f]+)")


def row_loop(sass: str) -> list[str]:
    """The smallest backward-branch loop of the disassembly that holds an IDP (DP4A)."""
    ins = [(int(m[1], 16), m[2]) for m in map(_INS.match, sass.splitlines()) if m]
    best: list[str] = []
    for addr, text in ins:
        m = _BACK.search(text)
        if m and int(m[1], 16) < addr:
            body = [t for a, t in ins if int(m[1], 16) <= a <= addr]
            if any("IDP" in t for t in body) and (not best or len(body) < len(best)):
                best = body
    return best


def held_section(sass: str) -> list[str]:
    """mmvq_st built with MMVQ_ST_XREG: a row's held items, straight-line code: in the row loop
    (the smallest backward loop holding the first SHFL.BFLY, the row's sum), outside the loops
    nested in it, from its first LDS to that shuffle."""
    ins = [(int(m[1], 16), m[2]) for m in map(_INS.match, sass.splitlines()) if m]
    loops = [(int(m[1], 16), a) for a, t in ins if (m := _BACK.search(t)) and int(m[1], 16) < a]
    shfl = next((a for a, t in ins if "SHFL.BFLY" in t), None)
    around = [lp for lp in loops if shfl is not None and lp[0] <= shfl <= lp[1]]
    if not around:
        return []
    row = min(around, key=lambda lp: lp[1] - lp[0])
    nested = [lp for lp in loops if row[0] <= lp[0] and lp[1] <= row[1] and lp != row]
    body = [t for a, t in ins
            if row[0] <= a < shfl and not any(lo <= a <= hi for lo, hi in nested)]  # fmt: skip
    first = next((i for i, t in enumerate(body) if "LDS" in t), len(body))
    return body[first:]


_IDP = re.compile(r"IDP\.\S+\s+(R\d+),\s*\S+,\s*\S+,\s*(R\d+|RZ)")
_DEST = re.compile(r"^(?:@!?U?P\w+\s+)?\S+\s+(R\d+)")


def dp4a_chain(loop: list[str]) -> int:
    """The longest run of IDP (DP4A/DP2A) in ``loop`` each accumulating the previous one's
    result (straight-line: a register another instruction writes ends its chain)."""
    depth: dict[str, int] = {}
    longest = 0
    for text in loop:
        m = _IDP.search(text)
        if m:
            depth[m[1]] = 1 + depth.get(m[2], 0)
            longest = max(longest, depth[m[1]])
        elif d := _DEST.match(text):
            depth.pop(d[1], None)
    return longest


def _option(argv: list[str], name: str) -> list[str]:
    """Every value of ``name VALUE`` in argv, removed from it."""
    values = []
    while name in argv:
        i = argv.index(name)
        values.append(argv[i + 1])
        del argv[i : i + 2]
    return values


def main(argv: list[str]) -> int:
    missing = [t for t in ("nvcc", "cuobjdump", "nvdisasm") if shutil.which(t) is None]
    if missing:
        sys.exit(f"needs {', '.join(missing)} on PATH")
    mix = "--mix" in argv  # also each loop's opcode histogram: where its instructions go
    staged = "--staged" in argv
    argv = [a for a in argv if a not in ("--mix", "--staged")]
    # --unroll N: items in flight a lane (MV_UNROLL, or MMVQ_ST_UNROLL) other than the engine's
    unroll = int(
        (_option(argv, "--unroll") or [matvec.STAGED_UNROLL if staged else matvec.MMVQ_UNROLL])[0]
    )
    # --rpw R: rows a warp walks together (MMVQ_ST_RPW) for every type, else each type's (staged)
    rpw_forced = _option(argv, "--rpw")
    knobs = _option(argv, "--define")
    # x held a lane (MMVQ_ST_XREG): a --define's for every type, else each type's declaration
    forced = [int(d.split("=")[1]) for d in knobs if d.startswith("-DMMVQ_ST_XREG=")]
    types = [quant_type(t) for t in argv[0].split(",")] if argv else list(QUANTIZED_TYPES)
    mixes = {}
    shown = staged and bool(forced[-1] if forced else any(t.mmvq.staged_x_held for t in types))
    held_cols = " held items | their SASS an item | a byte | LDS an item |" if shown else ""
    print(
        "| type | loop SASS | DP4A | values | GGUF bytes | SASS per byte | DP4A chain | registers |"
        + held_cols
    )
    print("|---|---|---|---|---|---|---|---|" + "---|" * (4 if shown else 0))
    with tempfile.TemporaryDirectory() as d:
        for qt in types:
            src, cubin = Path(d) / f"{qt.suffix}.cu", Path(d) / f"{qt.suffix}.cubin"
            # compiled as the engine compiles it (mmvq: the type's register cap)
            rpw = int(rpw_forced[0]) if rpw_forced else (
                qt.mmvq.staged_shape.rows_per_warp if staged else 1)  # fmt: skip
            text, opts = matvec.module_source(
                qt.suffix, unroll, qt.mmvq.min_blocks, rpw=rpw, staged=staged
            )
            src.write_text(text)
            fn = (matvec.staged_kernel_name if staged else matvec.kernel_name)(qt, 1)
            cmd = ["nvcc", "-arch=sm_90", "-cubin", *opts, *knobs, "-o", str(cubin), str(src)]
            subprocess.run(cmd, check=True)
            sass, res = (
                subprocess.run(["cuobjdump", flag, "-fun", fn, str(cubin)], check=True,
                               capture_output=True, text=True).stdout
                for flag in ("-sass", "-res-usage")
            )  # fmt: skip
            loop = row_loop(sass)
            dp4a = sum("IDP.4A" in t for t in loop)  # (IDP.2A: Q2_K/Q3_K's pair scales)
            values = 4 * dp4a // DP4A_PER_4_VALUES.get(qt.name, 1)
            nbytes = values * qt.type_size / qt.block_size
            regs = re.search(r"REG:(\d+)", res)
            held = ""
            xreg = forced[-1] if forced else qt.mmvq.staged_x_held
            if shown:  # (the loop above: items past the held ones, x from memory)
                # (a loop pass walks its R rows' item together: x's values a row are values / R)
                sec, items = held_section(sass), xreg // max(1, values // rpw)
                lds = sum("LDS" in t for t in sec)
                held = (f" {items} | {len(sec) / items:.0f} | {len(sec) / items / nbytes:.2f} | "
                        f"{lds / items:.1f} |" if items and sec else " 0 | – | – | – |")  # fmt: skip
            print(f"| {qt.name} | {len(loop)} | {dp4a} | {values} | {nbytes:.0f} | "
                  f"{len(loop) / nbytes:.2f} | {dp4a_chain(loop)} | {regs[1] if regs else '?'} |"
                  + held)  # fmt: skip
            # the opcode without its modifiers or predicate (@P0 FMUL.FTZ -> FMUL)
            ops = [re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0] for t in loop]
            mixes[qt.name] = collections.Counter(ops)
    if mix:
        for name, c in mixes.items():
            print(f"{name}: " + ", ".join(f"{op} {k}" for op, k in c.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
