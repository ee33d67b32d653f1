"""Static cost of every declared type's CUDA block decoders, without a GPU: one probe kernel per
type and path (byte-wise ``T::dec8``, word-wise ``Fast<T>::dec8``) decoding 8 values and storing
them, compiled with nvcc for sm_90 and disassembled with cuobjdump; prints SASS instructions and
global loads (count and widths) per probe. Fewer instructions per 16-byte output chunk is what
moves a dequant kernel towards copy bandwidth (the kernels issue-bound, not DRAM-bound, lose).
A decoder with a warp-uniform branch (Q3_K's on b % 4) counts both of its paths; so the rows
"word b%4=0" and "word b%4=2" (types with ALIGN 2) probe it again with b's alignment known to
the compiler (__builtin_assume), which keeps the one path a block of that parity runs.

    .venv/bin/python scripts/decoder_sass.py        (needs nvcc, cuobjdump and nvdisasm on PATH;
                                                    pip's nvidia-cuda-cuobjdump/-nvdisasm do)
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tracekit.quants import QUANTIZED_TYPES, cuda_defines

KERNELS = Path(__file__).resolve().parent.parent / "tracekit" / "kernels"
INSTR = re.compile(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)")


#: probe tag -> (label, decoder template, offset from a 4-byte aligned pointer or None)
PATHS = {
    "b": ("byte-wise", "{t}", None),
    "w": ("word-wise", "Fast<{t}>", None),
    "w0": ("word b%4=0", "Fast<{t}>", 0),
    "w2": ("word b%4=2", "Fast<{t}>", 2),
}


def probe_source() -> str:
    lines = ['#include "quant_decoders.cuh"']
    for t in QUANTIZED_TYPES:
        for tag, (_, dec, off) in PATHS.items():
            known = (
                "" if off is None else f"__builtin_assume(((unsigned long long)b & 3) == {off});"
            )
            lines.append(
                f'extern "C" __global__ void probe_{t.device}_{tag}(const u8* b, int c, float4* o)'
                f" {{ {known} float v[8]; {dec.format(t=t.device)}::dec8(b, c, v);"
                " o[0] = make_float4(v[0], v[1], v[2], v[3]);"
                " o[1] = make_float4(v[4], v[5], v[6], v[7]); }"
            )
    return "\n".join(lines) + "\n"


def word_aligns() -> dict[str, int]:
    """Each decoder struct's ALIGN (the types with a dec8_w), read from the header."""
    text = (KERNELS / "quant_decoders.cuh").read_text()
    out = {}
    for name, body in re.findall(r"\nstruct (\w+) \{(.*?)\n\};", text, re.S):
        m = re.search(r"static constexpr int ALIGN = (\d+);", body)
        if m:
            out[name] = int(m.group(1))
    return out


def main() -> None:
    aligns = word_aligns()
    missing = [t for t in ("nvcc", "cuobjdump", "nvdisasm") if shutil.which(t) is None]
    if missing:
        sys.exit(f"needs {', '.join(missing)} on PATH")
    with tempfile.TemporaryDirectory() as d:
        src, cubin = Path(d) / "probe.cu", Path(d) / "probe.cubin"
        src.write_text(probe_source())
        cmd = ["nvcc", "-arch=sm_90", "-std=c++17", "-cubin", f"-I{KERNELS}", *cuda_defines()]
        subprocess.run([*cmd, "-o", str(cubin), str(src)], check=True)
        sass = subprocess.run(
            ["cuobjdump", "-sass", str(cubin)], check=True, capture_output=True, text=True
        ).stdout
    funcs = dict(re.findall(r"Function : (\w+)\n(.*?)(?=\n\s+Function : |\Z)", sass, re.S))
    # per byte a chunk moves (16 out + its share of the block in): what copy bandwidth weighs
    print(f"{'type':8s} {'path':10s} {'SASS':>5s} {'/byte':>5s} {'loads':>5s}  widths")
    for t in QUANTIZED_TYPES:
        for tag, (path, _, off) in PATHS.items():
            if off is not None and aligns.get(t.device) != 2:
                continue
            ins = [i for i in INSTR.findall(funcs[f"probe_{t.device}_{tag}"]) if i != "NOP"]
            loads = [i for i in ins if i.startswith("LDG")]
            per_byte = len(ins) / (16 + 8 * t.type_size / t.block_size)
            widths = " ".join(sorted(set(loads)))
            print(f"{t.name:8s} {path:10s} {len(ins):5d} {per_byte:5.2f} {len(loads):5d}  {widths}")


if __name__ == "__main__":
    main()
