"""kernels/packed.py: launches packed once; the programmatic dependent launch's configuration
(cuLaunchKernelEx's CUlaunchConfig and CUlaunchAttribute as ctypes structures, checked against
cuda.h where the CUDA toolkit is installed) and stamp.cuh's griddepcontrol, compiled for sm_90.
The launches themselves run on the GPU: tests/runner/test_pdl_gpu.py."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tracekit.kernels import packed

CUDA_H = next(
    (p for p in (Path("/usr/local/cuda/include/cuda.h"), *Path("/usr/local").glob("cuda-*/include/cuda.h")) if p.exists()),
    None,
)  # fmt: skip


@pytest.mark.skipif(CUDA_H is None or shutil.which("gcc") is None, reason="needs cuda.h and gcc")
def test_launch_structures_match_cuda_h(tmp_path: Path) -> None:
    """Sizes and offsets of CUlaunchAttribute and CUlaunchConfig as the C compiler lays them
    out from the toolkit's cuda.h, and the attribute's id and value field."""
    src = tmp_path / "layout.c"
    src.write_text(
        "#include <stddef.h>\n#include <stdio.h>\n#include <cuda.h>\n"
        'int main(void) { printf("%zu %zu %zu %zu %zu %zu %zu %zu %d\\n",\n'
        "  sizeof(CUlaunchAttribute), offsetof(CUlaunchAttribute, value),\n"
        "  sizeof(CUlaunchConfig), offsetof(CUlaunchConfig, sharedMemBytes),\n"
        "  offsetof(CUlaunchConfig, hStream), offsetof(CUlaunchConfig, attrs),\n"
        "  offsetof(CUlaunchConfig, numAttrs),\n"
        "  offsetof(CUlaunchAttributeValue, programmaticStreamSerializationAllowed),\n"
        "  (int)CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION); return 0; }\n"
    )
    exe = tmp_path / "layout"
    subprocess.run(["gcc", f"-I{CUDA_H.parent}", "-o", str(exe), str(src)], check=True)
    got = [
        int(v) for v in subprocess.run([str(exe)], capture_output=True, text=True).stdout.split()
    ]
    a, c = packed.LaunchAttribute, packed.LaunchConfig
    assert got == [
        ctypes.sizeof(a), a.value.offset, ctypes.sizeof(c), c.shared_mem_bytes.offset,
        c.stream.offset, c.attrs.offset, c.num_attrs.offset, 0,
        packed.LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
    ]  # fmt: skip


def test_pdl_config_allows_programmatic_serialization() -> None:
    cfg, attr = packed.pdl_config((7, 2, 1), (32, 8, 1), 4096, 0xABC0)
    assert list(cfg.grid) == [7, 2, 1] and list(cfg.block) == [32, 8, 1]
    assert cfg.shared_mem_bytes == 4096 and cfg.stream == 0xABC0 and cfg.num_attrs == 1
    assert ctypes.addressof(cfg.attrs.contents) == ctypes.addressof(attr)
    assert attr.id == packed.LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert ctypes.c_int.from_buffer(attr, packed.LaunchAttribute.value.offset).value == 1


class _Fn:  # a compiled function as PackedLaunch reads it: its handle and name
    ptr = 0x5EED0
    name = "rms_norm_f32"


def test_packed_launch_with_and_without_pdl() -> None:
    entry = (_Fn(), (3,), (256,), (np.int32(5), np.float64(0.5)), 64)
    plain = packed.PackedLaunch(entry, 0x1000)
    assert plain.args[:9] == (_Fn.ptr, 3, 1, 1, 256, 1, 1, 64, 0x1000)  # cuLaunchKernel's
    pdl = packed.PackedLaunch(entry, 0x1000, pdl=True)
    assert callable(pdl.args)  # issue() calls it: cuLaunchKernelEx with the config
    cfg = pdl.args.args[0]._obj
    assert list(cfg.grid) == [3, 1, 1] and list(cfg.block) == [256, 1, 1]
    assert cfg.shared_mem_bytes == 64 and cfg.stream == 0x1000
    params = pdl.args.args[2]
    assert ctypes.c_int32.from_address(params[0]).value == 5
    assert ctypes.c_double.from_address(params[1]).value == 0.5


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("arch, has", [("sm_90", True), ("sm_80", False)])
def test_stamped_kernels_wait_for_the_grid_before_them(tmp_path: Path, arch: str, has: bool):
    """LaunchStamp (every stamped kernel's first statement) opens with griddepcontrol.wait on
    sm_90 and later, before the kernel's first load, and lets the next kernel launch as the
    block leaves (launch_dependents after the body's loads); not below sm_90."""
    from tracekit.kernels import cuda, norm  # noqa: F401  (norm registers its defines)

    (tmp_path / "norm.cu").write_text(cuda.source("norm"))
    opts = [o for o in cuda.options("norm") if o != "-std=c++17"]
    out = tmp_path / "norm.ptx"
    r = subprocess.run(["nvcc", f"-arch={arch}", "-ptx", "-std=c++17", *opts, "-o", str(out),
                        str(tmp_path / "norm.cu")], capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    body = out.read_text().split(".entry rms_norm_f32", 1)[1]
    if not has:
        assert "griddepcontrol" not in body
        return
    wait, trigger = (
        body.index("griddepcontrol.wait"),
        body.index("griddepcontrol.launch_dependents"),
    )
    assert wait < body.index("ld.global") < trigger
