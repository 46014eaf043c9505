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
                found.append(stack[stack.index(dep) :] + [dep])
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
    assert "pyspec" in graph["pyspec.tools.doctor"]  # `import pyspec` is an edge to the package
    assert "pyspec.checks" in graph["pyspec.cuda"]
    assert "pyspec.cuda" in graph["pyspec.verifier"]
    assert "pyspec.llama.model" in graph["pyspec.llama"]
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


# The layers, bottom up. A module's layer is named by where it lives; a new top-level module
# must be placed here on purpose (test_every_module_has_a_layer).
CORE_TOP = {
    "pyspec",
    "pyspec.errors",
    "pyspec.params",
    "pyspec.request",
    "pyspec.rng",
    "pyspec.checks",
    "pyspec.verifier",
    "pyspec.cuda",
    "pyspec.suffix_index",
    "pyspec.cache",
    "pyspec.switches",
}
LAYERS = ("core", "llama", "serve", "testing", "tools")


def layer_of(module: str) -> str:
    if module in CORE_TOP or module.startswith(("pyspec._native", "pyspec.arrays")):
        return "core"
    for name, prefix in (
        ("llama", "pyspec.llama"),
        ("serve", "pyspec.serve"),
        ("testing", "pyspec.testing"),
        ("tools", "pyspec.tools"),
    ):
        if module == prefix or module.startswith(prefix + "."):
            return name
    if module == "pyspec.__main__":
        return "tools"
    raise AssertionError(f"{module} belongs to no layer: place it in one (tests/test_structure.py)")


# Which layers each layer may import. The library (core, llama, serve) never imports the
# command line, the installer or the test tooling; the verifier core knows nothing of
# llama.cpp; the tools may use everything.
MAY_IMPORT = {
    "core": {"core"},
    "llama": {"core", "llama"},
    "serve": {"core", "llama", "serve"},
    "testing": {"core", "llama", "testing"},
    "tools": set(LAYERS),
}


def layer_violations(graph: dict) -> dict:
    found = {}
    for module, deps in graph.items():
        allowed = MAY_IMPORT[layer_of(module)]
        bad = sorted(d for d in deps if layer_of(d) not in allowed)
        if bad:
            found[module] = bad
    return found


def test_every_module_has_a_layer():
    graph = _import_graph()
    assert {layer_of(m) for m in graph} == set(LAYERS)
    assert layer_of("pyspec.llama.drafting.lookup") == "llama"
    assert layer_of("pyspec._native.ffi") == layer_of("pyspec.arrays.view") == "core"


def test_imports_run_down_the_layers():
    graph = _import_graph()
    assert layer_violations(graph) == {}
    # planted: the loop importing the installer, the core importing the loop
    planted = dict(graph)
    planted["pyspec.llama.loop"] = graph["pyspec.llama.loop"] | {"pyspec.tools.install_llama"}
    planted["pyspec.verifier"] = graph["pyspec.verifier"] | {"pyspec.llama.stats"}
    assert layer_violations(planted) == {
        "pyspec.llama.loop": ["pyspec.tools.install_llama"],
        "pyspec.verifier": ["pyspec.llama.stats"],
    }


def _third_party_imports(path: Path) -> set:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_core_never_imports_llama_cpp():
    core = [p for p in PACKAGE.rglob("*.py") if layer_of(_module_name(p)) == "core"]
    assert len(core) >= 15
    offenders = sorted(
        str(p.relative_to(PACKAGE))
        for p in core
        if {"llama_cpp", "fastapi", "uvicorn"} & _third_party_imports(p)
    )
    assert offenders == []
    assert "llama_cpp" in _third_party_imports(PACKAGE / "llama" / "loop.py")  # it sees them


# Where users import from today (README, docs, the examples): these must keep working.
PUBLIC_NAMES = {
    "pyspec": [
        "verify",
        "verify_batch",
        "verify_from_pointer",
        "sample",
        "distribution",
        "distribution_sparse",
        "row_logprobs",
        "SamplingParams",
        "VerifyRequest",
        "VerifyResult",
        "SparseDraftProbs",
        "LogitsPointer",
        "RowLogprobs",
        "Purpose",
        "philox4x32_10",
        "uniform",
        "PyspecError",
        "LogitsError",
        "DraftProbsError",
        "CapacityError",
        "cuda",
        "cuda_available",
        "SIMD",
        "HAS_CUDA",
        "default_threads",
    ],
    "pyspec.llama": [
        "SpeculativeLlama",
        "enable_speculation",
        "Speculation",
        "SpeculationStats",
        "PromptLookup",
        "DraftModel",
        "CallableDrafter",
        "Draft",
        "Drafter",
        "DraftLengthController",
        "ClosedError",
        "VocabularyMismatchError",
        "check_compatible",
        "sampling_params_for",
        "unsupported_reason",
    ],
    "pyspec.serve": ["main", "build_parser"],
    "pyspec.cuda": ["verify", "verify_batch", "cuda_available", "device_count"],
}


def test_public_names_stay_where_users_import_them():
    import importlib

    missing = {
        module: [n for n in names if not hasattr(importlib.import_module(module), n)]
        for module, names in PUBLIC_NAMES.items()
    }
    assert missing == {module: [] for module in PUBLIC_NAMES}


def test_the_graph_sampler_manifest_is_complete():
    """csrc/llama/graph_sources.txt is the one list of the in-graph sampler's sources (CMake
    installs from it, the run-time build compiles from it): every file of csrc/llama and
    every header a listed file includes must be on it."""
    import re

    from pyspec.llama.graph.build import MANIFEST, _manifest

    csrc = Path(__file__).resolve().parents[1] / "csrc"
    listed = set(_manifest(csrc))
    on_disk = {f"llama/{p.name}" for p in (csrc / "llama").iterdir() if p.suffix in (".c", ".h")}
    assert on_disk <= listed, sorted(on_disk - listed)
    from pyspec.llama.graph.build import _LLAMA_HEADERS

    missing = []
    for name in listed:
        for header in re.findall(r'#include "([^"]+)"', (csrc / name).read_text()):
            beside = (Path(name).parent / header).as_posix()  # else found on the -I csrc path
            if header not in _LLAMA_HEADERS and beside not in listed and header not in listed:
                missing.append(f"{name}: {header}")
    assert missing == []
    assert MANIFEST in {f"llama/{p.name}" for p in (csrc / "llama").iterdir()}
