"""Static cost of the quant path's matvec (``mmvq_<type>_n1``) per type, without a GPU: the
kernel compiled with nvcc for sm_90 as matvec.py compiles it (its MMVQ_* defaults), disassembled
with cuobjdump, and its row loop (the smallest loop holding the DP4A) counted: SASS instructions
per iteration, the values and GGUF bytes an iteration consumes, instructions per weight byte.
On the H200 the issue-bound types ran at about 280 / (instructions per byte) % of copy
(BENCHMARKS.md, 2026-12-01), so this is the number a change to Codes<T> or the loop moves.

    .venv/bin/python scripts/mmvq_sass.py [TYPE,...] [--mix] [--unroll N]
                                                      (--mix: each loop's opcodes;
                                                       needs nvcc, cuobjdump, nvdisasm on PATH;
                                                       pip's nvidia-cuda-cuobjdump/-nvdisasm do)
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
from tracekit.quants import QUANTIZED_TYPES, cuda_defines, quant_type  # noqa: E402

KERNELS = Path(matvec.__file__).resolve().parent
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


def main(argv: list[str]) -> int:
    missing = [t for t in ("nvcc", "cuobjdump", "nvdisasm") if shutil.which(t) is None]
    if missing:
        sys.exit(f"needs {', '.join(missing)} on PATH")
    mix = "--mix" in argv  # also each loop's opcode histogram: where its instructions go
    argv = [a for a in argv if a != "--mix"]
    unroll = matvec.MMVQ_UNROLL  # --unroll N: items in flight a lane (MV_UNROLL) other than it
    if "--unroll" in argv:
        i = argv.index("--unroll")
        unroll = int(argv[i + 1])
        del argv[i : i + 2]
    types = [quant_type(t) for t in argv[0].split(",")] if argv else list(QUANTIZED_TYPES)
    mixes = {}
    defines = [f"-DMV_UNROLL={unroll}", f"-DRUN_INTS={matvec.RUN_BYTES // 4}"]
    print("| type | loop SASS | DP4A | values | GGUF bytes | SASS per byte |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        for qt in types:
            src, cubin = Path(d) / f"{qt.suffix}.cu", Path(d) / f"{qt.suffix}.cubin"
            text = (KERNELS / "matvec.cu").read_text()
            src.write_text(text + f"\nMMVQ_KERNELS({qt.suffix}, {qt.device})\n")
            cmd = ["nvcc", "-arch=sm_90", "-std=c++17", "-cubin", f"-I{KERNELS}", *cuda_defines()]
            mb = f"-DMMVQ_MIN_BLOCKS={qt.mmvq.min_blocks}"  # the type's register cap
            subprocess.run([*cmd, *defines, mb, "-o", str(cubin), str(src)], check=True)
            sass = subprocess.run(
                ["cuobjdump", "-sass", "-fun", f"mmvq_{qt.suffix}_n1", str(cubin)],
                check=True, capture_output=True, text=True,
            ).stdout  # fmt: skip
            loop = row_loop(sass)
            dp4a = sum("IDP.4A" in t for t in loop)  # (IDP.2A: Q2_K/Q3_K's pair scales)
            values = 4 * dp4a // DP4A_PER_4_VALUES.get(qt.name, 1)
            nbytes = values * qt.type_size / qt.block_size
            print(f"| {qt.name} | {len(loop)} | {dp4a} | {values} | {nbytes:.0f} | "
                  f"{len(loop) / nbytes:.2f} |")  # fmt: skip
            # the opcode without its modifiers or predicate (@P0 FMUL.FTZ -> FMUL)
            ops = [re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0] for t in loop]
            mixes[qt.name] = collections.Counter(ops)
    if mix:
        for name, c in mixes.items():
            print(f"{name}: " + ", ".join(f"{op} {k}" for op, k in c.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
