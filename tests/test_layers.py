"""The layers: imports flow pipelines -> tasks -> solvers, with no cycle between modules,
counting imports inside functions (read with ast, not by importing); no module imports another
module's underscore names (a boundary that is real); no module over 800 lines (split by
concept, not by size); ``import solvers`` loads neither scikit-learn nor Numba, and deletes nothing."""

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
def test_no_module_is_over_800_lines(name, path):
    lines = len(path.read_text().splitlines())
    assert lines <= 800, f"{name} has {lines} lines"


def private_uses(path, name, known):
    """(module, name) of every underscore name ``path`` takes from another project module: imported
    by name (``from m import _x``) or read as an attribute of an imported module (``m._x``)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    found, aliases = [], {}
    private = lambda n: n.startswith("_") and not (n.startswith("__") and n.endswith("__"))  # noqa: E731
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in known:  # a module imported by name
                    aliases[alias.asname or alias.name] = target
                elif base in known and base != name and private(alias.name):
                    found.append((base, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    bound = alias.asname or alias.name.split(".")[0]  # `import a.b` binds a
                    aliases[bound] = alias.name if alias.asname else bound
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            chain, value = [], node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in aliases:
                target = ".".join([aliases[value.id]] + chain[::-1])
                if target in known and target != name:
                    found.append((target, node.attr))
    return found


def test_no_module_imports_another_modules_underscore_names():
    known = modules()
    wrong = [(name, module, attr) for name, path in known.items() for module, attr in private_uses(path, name, known)]
    assert wrong == [], f"underscore names taken across modules: {wrong}"


def test_the_private_check_sees_both_forms(tmp_path):
    module = tmp_path / "probe.py"
    module.write_text("from solvers.a import _x, y\nimport solvers.b as b\ndef f():\n    return b._z, b.w\n")
    known = {"solvers.a": None, "solvers.b": None, "solvers.probe": None}
    assert sorted(private_uses(module, "solvers.probe", known)) == [("solvers.a", "_x"), ("solvers.b", "_z")]


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
