"""The package layout of ../shared/DESIGN.md ("Layout"): imports run downward, no cycles.

Layers, lowest first (a module may import its own layer and the layers in its ``ALLOWED`` set)::

    app      tracekit (the package root), api, cli, bench, __main__: may import anything
    viz      the Dash app over trace files      -> trace, kernels, quants
    runner   graph, ops, execution, recording   -> model, trace, kernels, quants
    trace    the trace file and its views       -> kernels, quants
    model    a GGUF file as data                -> kernels, quants
    kernels  launchers, .cu, CPU references     -> quants
    quants   the type declarations
    base     tracekit._version                  (imports nothing)

trace and viz import ``kernels.stats.decode_heatmap`` (the heatmap encoding the statistics
kernels write); nothing else of the kernels.

How imports count: every ``import``/``from ... import`` in a module's source counts, wherever
it is: at top level, inside a function (a lazy import), or under ``if TYPE_CHECKING:``. A lazy
import still runs from the importing layer, and a TYPE_CHECKING import still names the other
layer's type in a signature: an upward one of either kind is an upward dependency, and none is
exempt (there is no stated reason for one today). Relative imports are resolved; ``from pkg
import name`` counts as an import of ``pkg.name`` when that is a module, else of ``pkg``.
``importlib.import_module``/``__import__`` with a constant string count too (cli.py's one
dynamic import has variable names: it is in the app layer, which may import anything).

Importing any submodule runs the package roots above it (``tracekit/__init__.py``,
``tracekit/kernels/__init__.py``, ...); they are not given edges to their children, so
:func:`test_package_roots_import_nothing_at_load` requires that a root import nothing of
tracekit at load time (the root's lazy ``tracekit.api`` import on first attribute use is the
app layer's own).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import tracekit

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "tracekit"

APP = frozenset({"tracekit", "tracekit.api", "tracekit.cli", "tracekit.bench", "tracekit.__main__"})
#: layer -> the layers it may import (besides its own)
ALLOWED: dict[str, frozenset[str]] = {
    "base": frozenset(),
    "quants": frozenset({"base"}),
    "kernels": frozenset({"quants", "base"}),
    "model": frozenset({"kernels", "quants", "base"}),
    "trace": frozenset({"kernels", "quants", "base"}),
    "runner": frozenset({"model", "trace", "kernels", "quants", "base"}),
    "viz": frozenset({"trace", "kernels", "quants", "base"}),
    "app": frozenset({"viz", "runner", "model", "trace", "kernels", "quants", "base"}),
}


def layer_of(module: str) -> str:
    """The layer of a tracekit module; an unknown module fails the test (classify it here)."""
    if module in APP:
        return "app"
    if module == "tracekit._version":
        return "base"
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in ALLOWED and parts[1] not in ("app", "base"):
        return parts[1]
    raise AssertionError(f"module {module} has no layer: add it to tests/test_layout.py")


def module_files(pkg: Path = PKG) -> dict[str, Path]:
    """Every module of the package: dotted name -> file."""
    out = {}
    for p in sorted(pkg.rglob("*.py")):
        parts = list(p.relative_to(pkg.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _dynamic_target(node: ast.Call) -> str | None:
    f = node.func
    named = (isinstance(f, ast.Name) and f.id == "__import__") or (
        isinstance(f, ast.Attribute) and f.attr == "import_module"
    )
    if named and node.args and isinstance(node.args[0], ast.Constant):
        value = node.args[0].value
        return value if isinstance(value, str) else None
    return None


def imports_of(source: str, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The tracekit modules that ``source`` (module ``module``) imports, anywhere in it."""
    package = module if is_package else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        elif isinstance(node, ast.Call):
            target = _dynamic_target(node)
            targets = [target] if target else []
        for t in targets:
            if t == "tracekit" or t.startswith("tracekit."):
                while t not in known and "." in t:  # `import tracekit.x.y` of a name in x
                    t = t.rpartition(".")[0]
                if t != module:
                    out.add(t)
    return out


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    known = set(files)
    return {
        m: imports_of(p.read_text(), m, p.name == "__init__.py", known) for m, p in files.items()
    }


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a layer that its importer's layer may not import."""
    bad = []
    for m, deps in sorted(graph.items()):
        lm = layer_of(m)
        for d in sorted(deps):
            ld = layer_of(d)
            if ld != lm and ld not in ALLOWED[lm]:
                bad.append(f"{m} ({lm}) imports {d} ({ld})")
    return bad


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


# -- the checker itself ----------------------------------------------------------------------------
def test_imports_of_sees_lazy_type_checking_relative_and_dynamic_imports() -> None:
    known = {"tracekit.a", "tracekit.a.b", "tracekit.a.c", "tracekit.d", "tracekit.e", "tracekit.f"}
    src = (
        "from typing import TYPE_CHECKING\n"
        "import numpy\n"
        "from . import c\n"
        "if TYPE_CHECKING:\n"
        "    from tracekit.d import Thing\n"
        "def f():\n"
        "    from tracekit.e import g\n"
        "    import importlib\n"
        "    return importlib.import_module('tracekit.f')\n"
    )
    assert imports_of(src, "tracekit.a.b", False, known) == {
        "tracekit.a.c",
        "tracekit.d",
        "tracekit.e",
        "tracekit.f",
    }


def test_upward_and_cycles_are_found_in_a_made_up_graph() -> None:
    graph = {
        "tracekit.kernels.x": {"tracekit.runner.y"},
        "tracekit.runner.y": {"tracekit.runner.z"},
        "tracekit.runner.z": {"tracekit.runner.y"},
    }
    assert upward(graph) == ["tracekit.kernels.x (kernels) imports tracekit.runner.y (runner)"]
    assert cycles(graph) == [["tracekit.runner.y", "tracekit.runner.z"]]
    assert cycles({"tracekit.runner.y": {"tracekit.runner.z"}, "tracekit.runner.z": set()}) == []


# -- the package -----------------------------------------------------------------------------------
def test_every_module_has_a_layer() -> None:
    for m in module_files():
        layer_of(m)


def test_no_module_imports_a_higher_layer() -> None:
    bad = upward(import_graph())
    assert not bad, "imports against the layering (tests/test_layout.py):\n" + "\n".join(bad)


def test_no_import_cycle() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_package_roots_import_nothing_at_load() -> None:
    """A package root runs whenever any of its submodules is imported: at load time (module
    level, outside ``if TYPE_CHECKING:``) it imports nothing of tracekit but the version."""
    for p in module_files().values():
        if p.name != "__init__.py":
            continue
        tree = ast.parse(p.read_text())
        loaded = set()
        for node in tree.body:  # module level only: lazy imports run later, in the app layer
            if isinstance(node, ast.Import):
                loaded |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level:
                loaded.add(node.module or "")
        loaded = {x for x in loaded if x.startswith("tracekit")}
        assert loaded <= {"tracekit._version"}, f"{p} imports {sorted(loaded)} when loaded"


def test_import_tracekit_is_light() -> None:
    code = (
        "import sys, tracekit\n"
        "heavy = sorted(m for m in ('numpy', 'gguf', 'cupy', 'dash') if m in sys.modules)\n"
        "ours = sorted(m for m in sys.modules if m.startswith('tracekit'))\n"
        "print(heavy, ours)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.strip()
    assert out == "[] ['tracekit', 'tracekit._version']"


# -- the public API --------------------------------------------------------------------------------
def _definers(name: str) -> set[str]:
    """The tracekit modules that define ``name`` at module level (def or class)."""
    out = set()
    for m, p in module_files().items():
        for node in ast.parse(p.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name:
                out.add(m)
    return out


@pytest.mark.parametrize("name", sorted(tracekit.__all__))
def test_public_name_resolves_to_its_one_implementation(name: str) -> None:
    from tracekit import _version, api

    obj = getattr(tracekit, name)
    assert name in dir(tracekit)
    if name == "__version__":
        assert obj == _version.__version__
        return
    assert obj is getattr(api, name), f"tracekit.{name} is not tracekit.api.{name}"
    assert name in api.__all__
    assert _definers(name) == {obj.__module__}, (
        f"{name} is defined in {sorted(_definers(name))}; one implementation, in "
        f"{obj.__module__}, re-exported elsewhere"
    )


def test_api_exports_are_the_package_exports() -> None:
    from tracekit import api

    assert set(api.__all__) == set(tracekit.__all__) - {"__version__"}


def test_documented_names_are_public() -> None:
    """Every ``tracekit.<name>`` the README's Python examples call is in ``tracekit.__all__``."""
    import re

    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    used = {n for b in blocks for n in re.findall(r"\btracekit\.([A-Za-z_]\w*)\b", b)}
    assert {"dequantize", "embed", "load_model"} <= used
    assert used <= set(tracekit.__all__), sorted(used - set(tracekit.__all__))


def test_unknown_attribute_raises() -> None:
    with pytest.raises(AttributeError, match="no attribute 'dequantise'"):
        tracekit.dequantise  # noqa: B018
