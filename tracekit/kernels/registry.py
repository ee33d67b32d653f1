"""One declaration per backend op: its NumPy reference and its launcher, side by side.

    runner/ (graph op)  ->  backend method  ->  launcher (grid contract)  ->  kernel

Each kernel family (``tracekit/kernels/<family>.py``) ends with the :class:`KernelOp`
declarations of its ops: the backend method name, the family, the reference ``ref_<op>`` and the
launcher ``launch_<op>`` (same arguments; the launcher may add ``out=`` and keyword-only
options), the ``__global__`` kernels the launcher may launch, the flops it records per element
and, for the streaming kernels, the elements one work item covers. The backend
(``tracekit/kernels/backend.py``) builds its methods from these declarations, so a new op is one
declaration, one kernel and one reference: the NumPy semantics and the CUDA launch are keyed by
the same name and cannot drift (tinygrad keys both by one op enum).

Registration happens once, when the family module is imported (``backend.py`` imports them
all); declaring a name twice is an error, so no table can exist twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tracekit.kernels import cuda

#: ``(output, LaunchRecord | list[LaunchRecord])``: what references and launchers return.
Impl = Callable[..., tuple[Any, Any]]


@dataclass(frozen=True)
class KernelOp:
    """A backend op.

    Attributes:
        name: the backend method (``add_f32``), and the kernel's name where it has one kernel.
        family: the ``.cu`` that holds its kernels (``cuda.source(family)``).
        ref: the NumPy reference (the CPU backend runs it; the oracle of the kernel).
        launch: the CuPy launcher, taking the reference's arguments (plus ``out=`` and
            keyword-only options).
        kernels: the ``__global__`` functions ``launch`` may launch (default: ``(name,)``;
            dequant and embed have one per quant type of the table).
        flops: flops recorded per element the op streams (its output's, or its input's for
            a reduction such as argmax; transcendentals counted as 1), or None where the family
            counts them from the shapes (attention's keys per query, rms_norm's weight or not).
        per_item: for a streaming kernel, the elements one vectorized work item covers, read at
            launch time from the family's geometry constants (which reach the kernel as ``-D``
            defines, and which the elementwise sweep changes); None elsewhere.
    """

    name: str
    family: str
    ref: Impl
    launch: Impl
    kernels: tuple[str, ...] = ()
    flops: int | None = None
    per_item: Callable[[], int] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.kernels:
            object.__setattr__(self, "kernels", (self.name,))

    @property
    def stamped(self) -> bool:
        """Whether every kernel of the op times itself when given a stamp slot (its source
        declares the LaunchStamp scope: ``cuda.STAMPED``, read off the ``.cu`` files)."""
        return all(k in cuda.STAMPED for k in self.kernels)


#: name -> declaration, filled as the family modules are imported.
KERNEL_OPS: dict[str, KernelOp] = {}


def declare(ops: Iterable[KernelOp]) -> None:
    """Register a family's ops (at the end of its module, after its references and launchers).

    Raises:
        ValueError: an op name is declared twice.
    """
    for op in ops:
        if op.name in KERNEL_OPS:
            raise ValueError(
                f"backend op {op.name!r} is declared twice ({KERNEL_OPS[op.name].family} and "
                f"{op.family})"
            )
        KERNEL_OPS[op.name] = op


def flops(name: str, elements: int) -> int:
    """The flops a launch of op ``name`` over ``elements`` output elements records."""
    per = KERNEL_OPS[name].flops
    if per is None:
        raise ValueError(f"backend op {name!r} declares no flops per element")
    return per * int(elements)
