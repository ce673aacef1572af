"""The layers: imports flow pipelines -> tasks -> solvers, with no cycle between modules,
counting imports inside functions (read with ast, not by importing); no module over
400 lines; ``import solvers`` loads neither scikit-learn nor Numba, and deletes nothing."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("solvers", "tasks", "pipelines")  # each may import only those before it (and itself)


def modules():
    """{module name: path} of every module of the three layers."""
    found = {}
    for layer in LAYERS:
        for path in (ROOT / layer).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_of(path, name, known):
    """The project modules ``path`` imports, at any depth (functions, methods, branches)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the package
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `from a.b import c`: c may be a name, not a module
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def graph():
    known = modules()
    return {name: imports_of(path, name, known) for name, path in known.items()}


def test_imports_flow_pipelines_to_tasks_to_solvers():
    wrong = [(a, b) for a, targets in graph().items() for b in targets
             if LAYERS.index(b.split(".")[0]) > LAYERS.index(a.split(".")[0])]
    assert wrong == [], f"imports against pipelines -> tasks -> solvers: {wrong}"


def test_no_import_cycles():
    g = graph()
    # a package's __init__ importing its own modules is not a cycle of the design
    edges = {a: {b for b in targets if not a.startswith(b + ".")} for a, targets in g.items()}
    state, cycles = {}, []

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_checker_sees_imports_inside_functions(tmp_path):
    """The graph is only worth what it sees: an import inside a method counts."""
    module = tmp_path / "probe.py"
    module.write_text("def f():\n    class A:\n        def g(self):\n            from tasks.data import x\n")
    assert imports_of(module, "solvers.probe", {"tasks.data", "solvers.probe"}) == {"tasks.data"}


@pytest.mark.parametrize("name,path", sorted(modules().items()))
def test_no_module_is_over_400_lines(name, path):
    lines = len(path.read_text().splitlines())
    assert lines <= 400, f"{name} has {lines} lines"


def test_importing_solvers_is_cheap_and_has_no_side_effects():
    pycache = ROOT / "solvers" / "kernels" / "__pycache__"
    before = sorted(p.name for p in pycache.glob("*")) if pycache.exists() else []
    code = ("import sys, solvers, solvers.distbelief.models, solvers.distbelief.lbfgs; "
            "print(sorted(m for m in ('numba', 'sklearn', 'scipy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    after = sorted(p.name for p in pycache.glob("*")) if pycache.exists() else []
    assert set(before) <= set(after)  # nothing deleted
