"""A graph node: its op, family, inputs, attributes and symbolic output shape (runner/graph.py
builds the graph of them; runner/ops.py's arms take them). Its own module so that the op
declarations (ops.py) and the graph builder (graph.py, which checks every op is declared) need
not import each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Step inputs a node may read besides other nodes and weights.
STEP_INPUTS = ("tokens", "positions", "rows")
#: Symbolic dimensions of output shapes: tokens in the step, logit rows selected.
NT, NR = "nt", "nr"


@dataclass(frozen=True)
class Node:
    """One graph node. ``shape`` is symbolic in ``"nt"``/``"nr"``; see :meth:`out_shape`."""

    id: int
    name: str
    op: str
    family: str
    layer: int | None
    inputs: tuple[str, ...]
    attrs: dict[str, Any] = field(default_factory=dict, hash=False)
    weight_type: str | None = None
    shape: tuple[int | str, ...] = ()
    dtype: str = "float32"

    @property
    def weight(self) -> str | None:
        """The tensor this node reads (``blk.0.attn_q.weight``), if any."""
        for i in self.inputs:
            if i.startswith("weight:"):
                return i[len("weight:") :]
        return None

    @property
    def data_inputs(self) -> tuple[str, ...]:
        """Inputs that are node outputs or step inputs (not weights)."""
        return tuple(i for i in self.inputs if not i.startswith("weight:"))

    def out_shape(self, nt: int, nr: int | None = None) -> tuple[int, ...]:
        """The concrete output shape for a step of ``nt`` tokens and ``nr`` logit rows."""
        dims = {NT: nt, NR: nt if nr is None else nr}
        return tuple(dims[d] if isinstance(d, str) else d for d in self.shape)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "op": self.op,
            "family": self.family,
            "layer": self.layer,
            "inputs": list(self.inputs),
            "attrs": dict(self.attrs),
            "weight_type": self.weight_type,
            "shape": list(self.shape),
            "dtype": self.dtype,
        }
