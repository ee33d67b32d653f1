"""stamp.cuh's measurement knobs, as scripts/stamp_cost.py compiles them: every variant of its
grid table and its --mechanism kernel build for sm_90 (compile only, no GPU), so a knob the
script names cannot rot unnoticed, and the knobs left at their defaults build the production
stamp exactly (the same PTX as no knob at all)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "tracekit" / "kernels"

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


def _stamp_cost():
    spec = importlib.util.spec_from_file_location("stamp_cost", ROOT / "scripts" / "stamp_cost.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


STAMP_COST = _stamp_cost()


def _ptx(tmp_path: Path, src: str, *defines: str) -> str:
    cu = tmp_path / "probe.cu"
    cu.write_text(src)
    out = tmp_path / "probe.ptx"
    r = subprocess.run(
        ["nvcc", "-arch=sm_90", "-ptx", "-std=c++17", f"-I{KERNELS}", *defines, "-o", str(out),
         str(cu)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, f"{defines}: {r.stderr[-2000:]}"
    return out.read_text()


@pytest.mark.parametrize("label", list(STAMP_COST.VARIANTS))
def test_every_stamp_cost_variant_compiles(tmp_path: Path, label: str):
    ptx = _ptx(tmp_path, STAMP_COST.SRC, *STAMP_COST.VARIANTS[label])
    assert ".entry stamp_probe" in ptx
    assert "griddepcontrol.wait" in ptx  # LaunchStamp's first act on sm_90, in every variant


def test_the_mechanism_kernel_compiles(tmp_path: Path):
    ptx = _ptx(tmp_path, STAMP_COST.MECHANISM_SRC)
    assert ".entry mech_probe" in ptx


def test_knobs_at_their_defaults_build_the_production_stamp(tmp_path: Path):
    plain = _ptx(tmp_path, STAMP_COST.SRC)
    spelled = _ptx(
        tmp_path, STAMP_COST.SRC, "-DSTAMP_COMPACT=1", "-DSTAMP_END_SOURCE=0", "-DSTAMP_PROBE=0",
        "-DSTAMP_EXIT_BARRIER=0", "-DSTAMP_EXIT_BARRIER_BLOCKS=0", "-DSTAMP_END_WORDS=1",
    )  # fmt: skip
    assert plain == spelled
    # and a knob that changes the end does change the code (the comparison above can fail)
    assert _ptx(tmp_path, STAMP_COST.SRC, "-DSTAMP_COMPACT=3") != plain
