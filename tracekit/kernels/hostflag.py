"""A stream held at a point until the host lets it go: a 32-bit flag in host memory it waits on.

A timed pass without graphs times a launch that cannot time itself (a cuBLASLt GEMM, issued as a
host call taking the stream) between two ``globaltimer_stamp`` kernels (runner/stamps.py). When
the GPU has run dry, the stamp before it would run as soon as it is queued, and the GEMM only
once the host has made its cuBLASLt call: the host's issue time would count in the GEMM. A
:class:`Gate` holds the stream before that stamp (``cuStreamWaitValue32`` on a flag in pinned,
device-mapped host memory, :class:`HostFlag`) and the host opens it (writes the flag) once the
GEMM and the stamp after it are queued, so the GPU runs the three back to back::

    host:    hold(seq) -> stamp -> cublasLtMatmul(...) -> stamp -> flag = seq
    stream:  [wait flag >= seq] [stamp] [GEMM kernels] [stamp]
                             ^ released here, with everything behind it already queued

Behind queued work the wait is met before the GPU reaches it and changes nothing.

Sequence numbers: each hold waits for the next ``seq`` (uint32, wrapping). The wait is
``CU_STREAM_WAIT_VALUE_GEQ``, cuda.h's *cyclic* greater-or-equal, ``(int32_t)(*flag - seq) >= 0``:
the flag holds the last opened seq, so a new hold (seq + 1) is unmet until opened, across the
wrap from 2^32 - 1 to 0 too, as long as the flag lags a pending hold by less than 2^31. A gate
keeps at most one hold pending (a hold opens a previous one a raising launch left closed), so it
lags by at most 1.

Support: CUDA 12's memory operations (the ``_v2`` entry points, the only ones CUDA 13's cuda.h
maps ``cuStreamWaitValue32`` to) have no device attribute of their own: 92,
``CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1``, is the deprecated v1 API's, and 123,
``..._CAN_USE_STREAM_WAIT_VALUE_NOR``, covers only the NOR condition. :func:`unsupported` checks
what the gate needs: the driver exports ``cuStreamWaitValue32_v2``, the device maps host memory,
and the driver accepts a wait that is already met (``CUDA_ERROR_NOT_SUPPORTED`` otherwise).

Memory through CuPy's runtime (``hostAlloc`` mapped, ``pointerGetAttributes`` for the device
address: CuPy has no ``cudaHostGetDevicePointer``); the wait through ctypes on libcuda (CuPy's
driver module has no stream memory operations), with the prototypes in :data:`PROTOTYPES`,
checked against cuda.h by tests/runner/test_hostflag.py.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any, Protocol

#: cuda.h: CUstreamWaitValue_flags' cyclic greater-or-equal (the default condition)
CU_STREAM_WAIT_VALUE_GEQ = 0x0
#: cuda.h: CUdevice_attribute "device can map host memory into CUDA address space" (the
#: runtime's cudaDevAttrCanMapHostMemory has the same value)
CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY = 19
#: cuda.h: CUresult of a memory operation the device or platform does not support
CUDA_ERROR_NOT_SUPPORTED = 801
#: driver_types.h: cudaHostAlloc's flag mapping the allocation into device space
HOST_ALLOC_MAPPED = 0x02
#: sequence numbers are cuuint32_t
SEQ_MASK = 0xFFFFFFFF

#: What every driver entry point returns: CUresult, an enum whose values are all >= 0, which
#: the C compiler makes an unsigned int.
RESULT = ("CUresult", ctypes.c_uint)
#: The driver entry points used, as (cuda.h parameter types, their ctypes), returning RESULT.
#: The C names are compiled against cuda.h in the tests (a wrong one fails to compile).
WAIT_VALUE_32 = "cuStreamWaitValue32_v2"
PROTOTYPES: dict[str, list[tuple[str, Any]]] = {
    WAIT_VALUE_32: [("CUstream", ctypes.c_void_p), ("CUdeviceptr", ctypes.c_uint64),
                    ("cuuint32_t", ctypes.c_uint32), ("unsigned int", ctypes.c_uint)],
    "cuGetErrorName": [RESULT, ("const char **", ctypes.POINTER(ctypes.c_char_p))],
}  # fmt: skip


def declare(lib: Any) -> Any:
    """Set :data:`PROTOTYPES` on a loaded driver library (``ctypes.CDLL``); returns it."""
    for name, params in PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.argtypes = [t for _, t in params]
        fn.restype = RESULT[1]
    return lib


@functools.cache
def libcuda() -> Any:
    """The driver library with :data:`PROTOTYPES` declared."""
    return declare(ctypes.CDLL("libcuda.so.1"))


def error_name(lib: Any, rc: int) -> str:
    msg = ctypes.c_char_p()
    lib.cuGetErrorName(rc, ctypes.byref(msg))
    return f"{(msg.value or b'?').decode()} ({rc})"


class Flag(Protocol):
    """What a :class:`Gate` issues through: a wait queued on a stream, a write from the host."""

    def wait(self, stream_ptr: int, value: int) -> None: ...

    def write(self, value: int) -> None: ...


class HostFlag:
    """One uint32 in pinned host memory mapped into the device (0 when allocated): the host
    writes it with a plain store, a stream waits on it with ``cuStreamWaitValue32``."""

    def __init__(self) -> None:
        from cupy.cuda import runtime

        self.host_ptr = int(runtime.hostAlloc(4, HOST_ALLOC_MAPPED))
        self.device_ptr = int(runtime.pointerGetAttributes(self.host_ptr).devicePointer)
        self._value = ctypes.c_uint32.from_address(self.host_ptr)
        self._value.value = 0
        self._lib = libcuda()

    def wait(self, stream_ptr: int, value: int) -> None:
        """Queue on the stream: hold what follows until the flag is cyclically >= ``value``."""
        rc = self._lib.cuStreamWaitValue32_v2(
            stream_ptr, self.device_ptr, value, CU_STREAM_WAIT_VALUE_GEQ
        )
        if rc != 0:
            raise RuntimeError(
                f"cuStreamWaitValue32 of the gate (value {value}, stream {stream_ptr:#x}) "
                f"failed: {error_name(self._lib, rc)}"
            )

    def write(self, value: int) -> None:
        self._value.value = value

    @property
    def value(self) -> int:
        return int(self._value.value)


class Gate:
    """Holds a stream until the host opens it (module docstring): :meth:`hold` queues a wait
    for the next sequence number, :meth:`open` writes the last one into the flag.

    Args:
        flag: where the waits and writes go (:class:`HostFlag`; a test passes a recorder).
        seq: the value the flag holds now (a fresh HostFlag: 0).
    """

    def __init__(self, flag: Flag, seq: int = 0) -> None:
        if not 0 <= seq <= SEQ_MASK:
            raise ValueError(f"gate sequence number {seq} is not a uint32 (0 to {SEQ_MASK})")
        self.flag = flag
        self.seq = seq  # the value the last hold waits for
        self.opened = seq  # the value the flag holds
        self.cold = 0  # gated launches run without a hold (runner/stamps.GateHold)

    @property
    def pending(self) -> bool:
        """Whether a hold is queued and not yet opened (the stream would wait on it)."""
        return self.opened != self.seq

    def hold(self, stream_ptr: int) -> None:
        """Queue a wait for the next sequence number on the stream (after opening a hold that
        a raising launch left pending: a gate never lags the flag by more than one)."""
        self.open()
        self.seq = (self.seq + 1) & SEQ_MASK
        self.flag.wait(stream_ptr, self.seq)

    def open(self, stream_ptr: int = 0) -> None:
        """Let every queued hold pass (write the last sequence number, if not yet written).
        ``stream_ptr``: what a timed launch's host entries are called with (the write is the
        host's, on no stream)."""
        if self.opened != self.seq:
            self.flag.write(self.seq)
            self.opened = self.seq


def unsupported(lib: Any = None, device: int | None = None) -> str | None:
    """Why the current device cannot hold a stream on a host flag, or None when it can
    (module docstring, "Support"). ``lib``: the driver library (default libcuda)."""
    name = getattr(lib, "_name", "libcuda.so.1")
    if lib is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            return f"no CUDA driver library ({e})"
    if not hasattr(lib, WAIT_VALUE_32):
        return f"the driver ({name}) exports no {WAIT_VALUE_32} (CUDA 11.7 or newer has it)"
    declare(lib)
    import cupy
    from cupy.cuda import runtime

    dev = cupy.cuda.Device().id if device is None else device
    if not runtime.deviceGetAttribute(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, dev):
        return f"device {dev} cannot map host memory (CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY 0)"
    flag = HostFlag()
    stream = cupy.cuda.Stream(non_blocking=True)
    # a wait for 0 on a flag holding 0: met at once, so the probe cannot hold anything
    rc = lib.cuStreamWaitValue32_v2(stream.ptr, flag.device_ptr, 0, CU_STREAM_WAIT_VALUE_GEQ)
    stream.synchronize()
    runtime.freeHost(flag.host_ptr)
    if rc == CUDA_ERROR_NOT_SUPPORTED:
        return f"device {dev} refuses stream memory operations ({error_name(lib, rc)})"
    if rc != 0:
        raise RuntimeError(f"probing cuStreamWaitValue32 on device {dev}: {error_name(lib, rc)}")
    return None
