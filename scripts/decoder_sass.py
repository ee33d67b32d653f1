"""Static cost of every declared type's CUDA block decoders, without a GPU: one probe kernel per
type and path (byte-wise ``T::dec8``, word-wise ``Fast<T>::dec8``) decoding 8 values and storing
them, compiled with nvcc for sm_90 and disassembled with cuobjdump; prints SASS instructions and
global loads (count and widths) per probe. Fewer instructions per 16-byte output chunk is what
moves a dequant kernel towards copy bandwidth (the kernels issue-bound, not DRAM-bound, lose).
A decoder with a warp-uniform branch (Q3_K's on b % 4) counts both of its paths.

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


def probe_source() -> str:
    lines = ['#include "quant_decoders.cuh"']
    for t in QUANTIZED_TYPES:
        for tag, dec in (("b", t.device), ("w", f"Fast<{t.device}>")):
            lines.append(
                f'extern "C" __global__ void probe_{t.device}_{tag}(const u8* b, int c, float4* o)'
                f" {{ float v[8]; {dec}::dec8(b, c, v);"
                " o[0] = make_float4(v[0], v[1], v[2], v[3]);"
                " o[1] = make_float4(v[4], v[5], v[6], v[7]); }"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
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
    print(f"{'type':8s} {'path':9s} {'SASS':>5s} {'/byte':>5s} {'loads':>5s}  widths")
    for t in QUANTIZED_TYPES:
        for tag, path in (("b", "byte-wise"), ("w", "word-wise")):
            ins = [i for i in INSTR.findall(funcs[f"probe_{t.device}_{tag}"]) if i != "NOP"]
            loads = [i for i in ins if i.startswith("LDG")]
            per_byte = len(ins) / (16 + 8 * t.type_size / t.block_size)
            widths = " ".join(sorted(set(loads)))
            print(f"{t.name:8s} {path:9s} {len(ins):5d} {per_byte:5.2f} {len(loads):5d}  {widths}")


if __name__ == "__main__":
    main()
