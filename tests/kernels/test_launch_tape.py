"""The launch tape and the stamp contract, on the CPU: what a replay relies on without a GPU.

The replays themselves run on the GPU (tests/runner/test_replay_gpu.py); here: recording nests
nowhere, every launch is recorded with its arguments, kernel arguments convert to fixed C types
(an untyped Python scalar is refused, not guessed), and every kernel named in ``cuda.STAMPED``
takes ``unsigned long long* stamp`` as its last parameter and opens the ``LaunchStamp`` scope first.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import numpy as np
import pytest

from tracekit.kernels import cuda, matvec  # noqa: F401 (matvec registers its stamped kernels)
from tracekit.kernels.packed import c_arg

KERNELS = Path(cuda.__file__).resolve().parent


class _FakeKernel:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __call__(self, grid, block, args, shared_mem=0):
        self.calls.append((grid, block, args, shared_mem))


def test_recording_keeps_every_launch_in_order_with_its_arguments() -> None:
    fn = _FakeKernel()
    tape = cuda.LaunchTape()
    cuda.launch(fn, (1, 1, 1), (32, 1, 1), (np.int32(1),))  # not recorded: no tape
    with cuda.recording(tape):
        cuda.launch(fn, (2, 1, 1), (64, 1, 1), (np.int64(7), np.float32(0.5)), 128)
        cuda.record_host_call(print)
    cuda.launch(fn, (3, 1, 1), (32, 1, 1), ())
    assert len(fn.calls) == 3  # every launch ran
    assert len(tape) == 2
    assert tape.entries[0] == (fn, (2, 1, 1), (64, 1, 1), (np.int64(7), np.float32(0.5)), 128)
    assert tape.entries[1] is print


def test_recordings_do_not_nest() -> None:
    with cuda.recording(cuda.LaunchTape()):
        with pytest.raises(RuntimeError, match="already being recorded"):
            with cuda.recording(cuda.LaunchTape()):
                pass
    with cuda.recording(cuda.LaunchTape()):  # the first one ended cleanly
        pass


def test_kernel_arguments_convert_to_fixed_c_types() -> None:
    class Dev:  # what the conversion reads from a CuPy array: data.ptr
        class data:  # noqa: N801
            ptr = 0xDEAD0000

    cases = [
        (np.int32(-3), ctypes.c_int32, -3),
        (np.int64(2**40), ctypes.c_int64, 2**40),
        (np.uint64(0), ctypes.c_uint64, 0),
        (np.float32(0.25), ctypes.c_float, 0.25),
        (np.float64(1e-6), ctypes.c_double, 1e-6),
    ]
    for value, ctype, want in cases:
        c = c_arg(value)
        assert isinstance(c, ctype) and c.value == want
    ptr = c_arg(Dev())
    assert isinstance(ptr, ctypes.c_void_p) and ptr.value == 0xDEAD0000
    for bad in (3, 2.5, True, "x"):
        with pytest.raises(TypeError, match="no fixed C type"):
            c_arg(bad)


def _kernel_params(name: str) -> tuple[str, str]:
    """(parameter list, body start) of ``name``'s definition in the family sources (each .cu
    with its generated instantiations, as it is compiled)."""
    import tracekit.kernels.dequant
    import tracekit.kernels.embed  # noqa: F401 (they register their generated instantiations)

    for cu in KERNELS.glob("*.cu"):
        src = cuda.source(cu.stem)
        m = re.search(rf"void {name}\s*\(([^)]*)\)\s*\{{\s*([^;]*;)", src)
        if m:
            return m.group(1), m.group(2)
        # instantiated from a macro: MACRO(name, ...) and #define MACRO(name, ...) body
        use = re.search(rf"^(\w+)\({name},", src, re.M)
        if use:
            m = re.search(rf"#define {use.group(1)}\(name[^)]*\)(.*?)\n\n", src, re.S)
            assert m is not None, use.group(1)
            body = m.group(1).replace("\\\n", "\n")
            params = re.search(r"void name\(([^)]*)\)", body)
            first = re.search(r"\{\s*([^;]*;)", body)
            assert params and first
            return params.group(1), first.group(1)
        # kernels a macro declares with pasted names (matvec's MMVQ_KERNEL(suffix, T, NT):
        # mmvq_##suffix##_n##NT): each pasted parameter matches a word
        for macro in re.finditer(r"#define \w+\([^)]*\)((?:.*\\\n)*.*)", src):
            flat = macro.group(1).replace("\\\n", "")
            for decl in re.finditer(
                r"__global__ void\s+(?:__launch_bounds__\([^)]*\)\s*)?(\w+(?:##\w+)+)\(([^)]*)\)",
                flat,
            ):
                parts = decl.group(1).split("##")
                pat = "".join(re.escape(p) if k % 2 == 0 else r"\w+" for k, p in enumerate(parts))
                if re.fullmatch(pat, name):
                    first = re.search(r"\{\s*([^;]*;)", flat[decl.end() :])
                    assert first
                    return decl.group(2), first.group(1)
    raise AssertionError(f"kernel {name} not found in {KERNELS}/*.cu")


@pytest.mark.parametrize("name", sorted(cuda.STAMPED))
def test_stamped_kernels_end_with_the_stamp_and_stamp_first(name: str) -> None:
    params, first = _kernel_params(name)
    last = params.split(",")[-1].split()
    assert last[:3] == ["unsigned", "long", "long*"] and last[-1] == "stamp", params
    assert first.startswith("const LaunchStamp launch_stamp(stamp)"), first


def test_no_stamp_is_a_null_pointer() -> None:
    assert cuda.NO_STAMP == 0 and cuda.NO_STAMP.dtype == np.uint64
