"""The grid contract and the launch record: the one place grid and block are computed.

Every launcher asks :func:`grid_1d` (or :func:`grid_rows`) for its geometry, launches with
exactly that geometry and returns the :class:`LaunchRecord` built from it, so the trace cannot
disagree with what ran. The NumPy backend returns records too (grid and block empty), with
the same byte counts, so both backends produce the same trace structure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

#: CUDA's grid x-dimension limit (2^31 - 1); y and z are limited to 65535.
MAX_GRID_X = 2**31 - 1
MAX_GRID_YZ = 65535
#: The default threads per block: a multiple of the warp width (32), as in the seed.
DEFAULT_BLOCK = 256


def ceil_div(a: int, b: int) -> int:
    """ceil(a / b) on Python ints (arbitrary precision: no 32-bit overflow)."""
    if b <= 0:
        raise ValueError(f"divisor {b} must be positive")
    if a < 0:
        raise ValueError(f"dividend {a} must be non-negative")
    return -(-a // b)


@dataclass(frozen=True)
class Geometry:
    """A launch's grid and block, plus how many threads have work (``work_items``).

    When the work needs more blocks than the x-dimension allows, the grid is clamped and the
    kernel must loop (grid-stride), so a clamp never drops work: ``strided`` says so.
    """

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    work_items: int

    @property
    def threads_launched(self) -> int:
        g, b = self.grid, self.block
        return g[0] * g[1] * g[2] * b[0] * b[1] * b[2]

    @property
    def strided(self) -> bool:
        return self.threads_launched < self.work_items


def grid_1d(total: int, block: int = DEFAULT_BLOCK, max_grid: int = MAX_GRID_X) -> Geometry:
    """One thread per work item: grid = ceil(total / block), clamped to ``max_grid``.

    ``total`` is a Python int, so the product that produced it cannot have overflowed; a
    kernel launched with a clamped grid must use a grid-stride loop over a 64-bit index.
    """
    if total < 0:
        raise ValueError(f"work item count {total} must be non-negative")
    if not 1 <= block <= 1024:
        raise ValueError(f"block size {block} must be in [1, 1024]")
    grid = max(1, min(ceil_div(total, block), max_grid))
    return Geometry((grid, 1, 1), (block, 1, 1), total)


def grid_rows(rows: int, cols: int, block: int = 64) -> Geometry:
    """One block row per token (seed §3.1, ``add_bias_f32``): grid = (rows, ceil(cols / block)).

    Rows go in grid.x (limit 2^31 - 1), column tiles in grid.y (limit 65535).
    """
    if rows < 0 or cols < 0:
        raise ValueError(f"rows {rows} and cols {cols} must be non-negative")
    gy = ceil_div(cols, block)
    if rows > MAX_GRID_X:
        raise ValueError(f"row count {rows} exceeds the grid x limit {MAX_GRID_X}")
    if gy > MAX_GRID_YZ:
        raise ValueError(f"{cols} columns need {gy} column tiles, over the grid y limit 65535")
    return Geometry((max(rows, 1), max(gy, 1), 1), (block, 1, 1), rows * cols)


def _nbytes(arrays: Iterable[Any]) -> int:
    return int(sum(int(a.nbytes) for a in arrays))


@dataclass
class LaunchRecord:
    """What one launch did: the raw material of the trace's performance annotations.

    ``bytes_read``/``bytes_written`` are the fewest bytes the launch must move (each input read
    once, each output written once), computed from the real arrays and the quant table.
    """

    kernel: str
    grid: tuple[int, int, int] | None
    block: tuple[int, int, int] | None
    threads_launched: int
    threads_working: int
    bytes_read: int
    bytes_written: int
    flops: int
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        kernel: str,
        geometry: Geometry | None,
        reads: Iterable[Any] = (),
        writes: Iterable[Any] = (),
        flops: int = 0,
        bytes_read: int | None = None,
        bytes_written: int | None = None,
        threads_working: int | None = None,
        **extra: Any,
    ) -> LaunchRecord:
        """Build a record from the geometry used and the arrays read and written.

        ``bytes_read``/``bytes_written`` override the array sums where only part of an array is
        touched (a gather reads nt rows of a table, not the table).
        """
        return cls(
            kernel=kernel,
            grid=geometry.grid if geometry else None,
            block=geometry.block if geometry else None,
            threads_launched=geometry.threads_launched if geometry else 0,
            threads_working=(
                threads_working
                if threads_working is not None
                else (min(geometry.work_items, geometry.threads_launched) if geometry else 0)
            ),
            bytes_read=_nbytes(reads) if bytes_read is None else int(bytes_read),
            bytes_written=_nbytes(writes) if bytes_written is None else int(bytes_written),
            flops=int(flops),
            extra=dict(extra),
        )

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["grid"] = list(self.grid) if self.grid else None
        d["block"] = list(self.block) if self.block else None
        if not d["extra"]:
            del d["extra"]
        return d
