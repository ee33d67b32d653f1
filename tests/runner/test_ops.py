"""The graph op declarations (tracekit/runner/ops.py): each op's arm, the backend ops it calls,
its family and flops from their declarations; the graphs of every architecture use declared ops
only; and no op or type table is typed a second time anywhere in tracekit/."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from tracekit.kernels.backend import ROUTED, Backend
from tracekit.kernels.registry import KERNEL_OPS
from tracekit.model.synthetic import SPECS, write_synthetic_model
from tracekit.quants import QUANT_TABLE
from tracekit.runner import ops
from tracekit.runner.execute import load_model
from tracekit.runner.graph import build_graph
from tracekit.runner.ops import OPS, Op

ROOT = Path(__file__).resolve().parents[2] / "tracekit"

#: The spec the declarations must meet: graph op -> (family, backend ops called in order).
SPEC = {
    "embed_rows": ("embed", ("embed_rows",)),
    "gather_rows": ("embed", ("gather_rows_f32",)),
    "scale": ("elementwise", ("scale_f32",)),
    "add": ("elementwise", ("add_f32",)),
    "add_bias": ("elementwise", ("add_bias_f32",)),
    "mul": ("elementwise", ("mul_f32",)),
    "silu": ("elementwise", ("silu_f32",)),
    "gelu_tanh": ("elementwise", ("gelu_tanh_f32",)),
    "softcap": ("elementwise", ("softcap_f32",)),
    "glu": ("elementwise", ("glu_f32",)),
    "slice_cols": ("elementwise", ("slice_cols_f32",)),
    "rms_norm": ("norm", ("rms_norm_f32",)),
    "add_rms_norm": ("norm", ("add_rms_norm_f32",)),
    "plane": ("norm", ()),  # a view of add_rms_norm's output: no backend op, no launch
    "rope": ("rope", ("rope_f32",)),
    "attention": ("attention", ("kv_store_f32", "attention_f32")),
    "matmul": ("matmul", ("matmul",)),
}
#: Flops per element each backend op records (kernels/<family>.py module docs; transcendentals
#: count 1); None: counted from the shapes by the family.
FLOPS = {
    "add_f32": 1, "add_bias_f32": 1, "mul_f32": 1, "silu_f32": 3, "gelu_tanh_f32": 9,
    "scale_f32": 1, "softcap_f32": 3, "glu_f32": None, "slice_cols_f32": 0, "f32_bits_to_i32": 0,
    "convert_f32_f16": 0, "dequantize_f16": 2, "embed_rows": 2, "gather_rows_f32": 0,
    "rms_norm_f32": None, "add_rms_norm_f32": None, "rope_f32": 3, "kv_store_f32": 0, "attention_f32": None,
    "softmax_f32": 5, "argmax_f32": 1,
}  # fmt: skip


def test_every_graph_op_is_declared_with_its_family_and_calls() -> None:
    assert {n: (o.family, o.calls) for n, o in OPS.items()} == SPEC


def test_declared_flops_per_element() -> None:
    assert {n: o.flops for n, o in KERNEL_OPS.items()} == FLOPS


def test_each_arm_is_its_function_and_takes_backend_node_step() -> None:
    for name, o in OPS.items():
        assert o.arm is getattr(ops, name) and o.name == name
        assert list(inspect.signature(o.arm).parameters)[:3] == ["be", "node", "st"]


def test_each_arm_calls_exactly_the_backend_ops_it_declares() -> None:
    methods = set(KERNEL_OPS) | set(ROUTED)
    for o in OPS.values():
        called = [
            n.func.attr
            for n in ast.walk(ast.parse(inspect.getsource(o.arm)))
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id == "be"
        ]
        assert set(called) == set(o.calls) and set(called) <= methods, o.name


def test_the_first_kernel_of_every_op_but_the_cublas_matmul_is_stamped() -> None:
    # a timed CUDA-graph replay stamps a node's first kernel; an unstamped one needs stamp kernels
    for o in OPS.values():
        assert all(k.stamped for k in o.kernel_ops), o.name
        assert bool(o.kernel_ops) == (o.name not in ("matmul", "plane"))
        assert (o.view_of is not None) == (o.name == "plane") == (not o.calls)


def test_declaring_an_op_needs_declared_backend_ops_and_a_new_name() -> None:
    before = dict(OPS)
    with pytest.raises(KeyError, match="'nope_f32' is not a backend op"):
        ops.op("nope_f32")
    with pytest.raises(ValueError, match="at least one backend op"):
        ops.op()
    with pytest.raises(ValueError, match=r"view op of 'norm' calls backend ops \('add_f32',\)"):
        ops.op("add_f32", view_of="norm")
    with pytest.raises(ValueError, match="'add' is declared twice"):
        ops.op("add_f32")(ops.add)
    assert OPS == before
    assert Op("x", ops.add, ("matmul", "add_f32")).family == "matmul"
    assert Op("v", ops.plane, (), "elementwise").family == "elementwise"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict:
    d = tmp_path_factory.mktemp("ops")
    return {a: load_model(write_synthetic_model(d / f"{a}.gguf", a, seed=1)) for a in SPECS}


@pytest.mark.parametrize("arch", list(SPECS))
def test_graphs_use_declared_ops_only(models: dict, arch: str) -> None:
    g = models[arch].graph
    assert {n.op for n in g} <= set(OPS)
    assert all(n.family == OPS[n.op].family for n in g)
    assert build_graph(models[arch].config).names() == g.names()


def test_an_undeclared_op_in_the_graph_is_named() -> None:
    from tracekit.runner.graph import _Builder

    with pytest.raises(ValueError, match="node blk.0.x: op 'swish' is not declared"):
        _Builder(None).add("blk.0.x", "swish", ("tokens",), ("nt", 4), 0)


# -- no table twice -----------------------------------------------------------------------------
#: Name collections that are not copies of a declaration (what each one is instead).
NOT_COPIES = {
    # the ops diff has an error-propagation rule for (its _explained), not a property of ops
    ("trace/diff.py", "_ELEMENTWISE"),
}


def _tables(tree: ast.AST, names: set[str]) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        target = node.targets[0] if isinstance(node, ast.Assign) else node.target
        value = node.value
        if isinstance(value, ast.Call) and len(value.args) == 1:  # frozenset({...}), set([...])
            value = value.args[0]
        if isinstance(value, ast.Dict):  # a data table: constant values (not a dispatch of code)
            if not all(isinstance(v, ast.Constant) for v in value.values):
                continue
            keys = value.keys
        elif isinstance(value, (ast.Set, ast.List, ast.Tuple)):
            keys = value.elts
        else:
            continue
        hits = [k.value for k in keys if isinstance(k, ast.Constant) and k.value in names]
        if len(hits) >= 3:
            found.append((ast.unparse(target), node.lineno))
    return found


def test_no_op_or_type_table_is_typed_outside_the_declarations() -> None:
    families = {o.family for o in OPS.values()} | {o.family for o in KERNEL_OPS.values()}
    names = (set(OPS) | set(KERNEL_OPS) | {t.name for t in QUANT_TABLE.values()}) - families
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for target, line in _tables(ast.parse(path.read_text()), names):
            if (rel, target) not in NOT_COPIES:
                found.append(f"{rel}:{line} {target}")
    assert found == []


def test_the_table_scan_finds_a_parallel_table() -> None:
    src = 'OP_FAMILY = {"add": "elementwise", "mul": "elementwise", "rope": "rope"}\n'
    src += 'UNROLLED = frozenset({"add_f32", "mul_f32", "silu_f32"})\nX = ("add", "mul")\n'
    src += 'BENCH = {"add_f32": lambda: 1, "mul_f32": lambda: 2, "silu_f32": lambda: 3}\n'
    assert [t for t, _ in _tables(ast.parse(src), set(OPS) | set(KERNEL_OPS))] == [
        "OP_FAMILY",
        "UNROLLED",
    ]


def test_the_backend_has_no_hand_written_op_methods() -> None:
    # the methods are made from the declarations: none is defined in a class body
    for cls in (Backend, *Backend.__subclasses__()):
        src = inspect.getsource(cls)
        for name in KERNEL_OPS:
            assert f"def {name}(" not in src, f"{cls.__name__}.{name}"


def test_the_trace_schema_lists_every_graph_op() -> None:
    # a reader learns the ops of this version from the schema (its "examples"), in declaration
    # order: an op declared without being listed there fails here
    import json

    from tracekit.trace.format import SCHEMA_PATH

    node = json.loads(SCHEMA_PATH.read_text())["$defs"]["topology_node"]["properties"]["op"]
    assert node["examples"] == list(OPS)
