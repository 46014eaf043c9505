"""The package's shape: no import cycles, the device path independent of the host path.

Read from the installed package's sources with ``ast`` (nothing is imported to find the
edges), counting imports inside functions too: a cycle hidden in a function is still one.
"""
import ast
from pathlib import Path

import pyspec

PACKAGE = Path(pyspec.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict:
    """{module: the pyspec modules it imports anywhere in its source}."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    deps.add(full if full in modules else target)
            elif isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
        missing = {d for d in deps if d.startswith("pyspec") and d not in modules}
        assert not missing, f"{name} imports modules that do not exist: {sorted(missing)}"
        graph[name] = {d for d in deps if d in modules and d != name}
    return graph


def _cycles(graph: dict) -> list:
    state, found = {}, []

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == "open":
                found.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, stack)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return found


def test_the_graph_sees_the_imports_it_should():
    graph = _import_graph()
    assert "pyspec" in graph["pyspec.doctor"]  # `import pyspec` is an edge to the package
    assert "pyspec.checks" in graph["pyspec.cuda"]
    assert "pyspec.cuda" in graph["pyspec.verifier"]
    assert "pyspec.llama.speculative" in graph["pyspec.llama"]
    # a planted cycle is found
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]


def test_no_import_cycle_in_the_package():
    assert _cycles(_import_graph()) == []


def test_the_device_path_never_imports_the_host_path():
    """pyspec.cuda and what it imports share pyspec.checks with the host path, not verifier."""
    graph = _import_graph()
    reach, todo = set(), ["pyspec.cuda"]
    while todo:
        for dep in graph[todo.pop()] - reach:
            reach.add(dep)
            todo.append(dep)
    assert "pyspec.verifier" not in reach, sorted(reach)


# The command-line front ends may use the tooling (the demo models); nothing else may.
FRONT_ENDS = {"pyspec.cli", "pyspec.cli_generate", "pyspec.doctor", "pyspec.bench", "pyspec.__main__"}


def test_the_library_never_imports_its_test_and_demo_tooling():
    graph = _import_graph()
    tooling = {m for m in graph if m == "pyspec.testing" or m.startswith("pyspec.testing.")}
    assert {"pyspec.testing.models", "pyspec.testing.replay", "pyspec.testing.llama_chain"} <= tooling
    library = set(graph) - tooling - FRONT_ENDS
    offenders = {m: sorted(graph[m] & tooling) for m in library if graph[m] & tooling}
    assert offenders == {}
    for front in FRONT_ENDS & set(graph):  # and the library does not reach a front end
        assert not any(front in graph[m] for m in library if m not in FRONT_ENDS), front
