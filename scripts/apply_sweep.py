"""Write sweep_dequant.py's best exact configuration per type into tracekit/quants.py.

    python3 scripts/sweep_dequant.py Q2_K Q3_K | tee sweep.log
    python3 scripts/apply_sweep.py sweep.log

The sweep ends with a ``CONFIG = {`` table of ``_T.<NAME>: KernelConfig(variant, block,
chunks),`` lines; each becomes ``dequant=DequantConfig(variant, block, chunks)`` in the class
argument list of ``class <NAME>(QuantType, ...)`` (added, or replacing the one there).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

QUANTS = Path(__file__).resolve().parent.parent / "tracekit" / "quants.py"
BEST = re.compile(r"^\s+_T\.(\w+): KernelConfig\((\d+, \d+, \d+)\),$", re.M)


def apply(log: str, src: str) -> tuple[str, list[str]]:
    """``src`` with every configuration of ``log`` written in, and one line per type applied."""
    done = []
    for name, cfg in BEST.findall(log):
        # the class's argument list, on one line or wrapped over several
        m = re.search(
            rf"^class {name}\(\s*QuantType,\s*qtype=_T\.{name}\b(.*?)\):", src, re.M | re.S
        )
        if m is None:
            raise SystemExit(f"{name}: no `class {name}(QuantType, qtype=_T.{name}...)` line")
        args = m.group(1)
        new = f"dequant=DequantConfig({cfg})"
        if "dequant=DequantConfig(" in args:
            args = re.sub(r"dequant=DequantConfig\([^)]*\)", new, args)
        else:
            args = args.rstrip() + f", {new}" + ("\n" if args.endswith("\n") else "")
        src = src[: m.start(1)] + args + src[m.end(1) :]
        done.append(f"{name}: DequantConfig({cfg})")
    return src, done


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: apply_sweep.py SWEEP_LOG")
    src, done = apply(Path(sys.argv[1]).read_text(), QUANTS.read_text())
    if not done:
        raise SystemExit(f"{sys.argv[1]}: no CONFIG lines (did the sweep finish?)")
    QUANTS.write_text(src)
    print("\n".join(done))


if __name__ == "__main__":
    main()
