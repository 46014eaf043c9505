"""One exception hierarchy: every class pyspec raises lives in pyspec/errors.py under
PyspecError, keeps the built-in base its callers catch, and is raised where it belongs."""

import ast
from pathlib import Path

import numpy as np
import pytest

import pyspec
from pyspec import errors

PACKAGE = Path(pyspec.__file__).parent
BUILTIN_BASES = {"Exception", "ValueError", "RuntimeError", "TypeError", "OSError", "KeyError"}


def _exception_classes_outside_errors() -> list:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "errors.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {getattr(b, "id", getattr(b, "attr", "")) for b in node.bases}
                if bases & BUILTIN_BASES or any(b.endswith("Error") for b in bases):
                    found.append(f"{path.relative_to(PACKAGE)}: {node.name}")
    return found


def test_every_exception_class_lives_in_errors_py():
    assert _exception_classes_outside_errors() == []


def test_every_class_is_a_pyspec_error_with_its_builtin_base():
    classes = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, Exception)]
    assert len(classes) == 17  # the tree in the docstring
    assert all(issubclass(c, errors.PyspecError) for c in classes)
    invalid = [c for c in classes if issubclass(c, errors.InvalidInputError)]
    runtime = [c for c in classes if issubclass(c, errors.PyspecRuntimeError)]
    assert all(issubclass(c, ValueError) for c in invalid)
    assert all(issubclass(c, RuntimeError) for c in runtime)
    # every class but the root is on exactly one side
    assert set(invalid) | set(runtime) == set(classes) - {errors.PyspecError}
    assert not set(invalid) & set(runtime)
    assert issubclass(errors.InvalidRequestError, errors.InvalidInputError)
    assert issubclass(errors.ArgumentTypeError, TypeError)


def test_names_stay_importable_where_they_were():
    from pyspec.llama import ClosedError, VocabularyMismatchError
    from pyspec.llama.graph.build import GraphSamplerUnavailable
    from pyspec.llama.runtime.guard import UnsafeLlamaBuildError
    from pyspec.tools.generate import UsageError
    from pyspec.tools.install_llama import LlamaBuildError

    moved = (
        ClosedError,
        VocabularyMismatchError,
        GraphSamplerUnavailable,
        UnsafeLlamaBuildError,
        UsageError,
        LlamaBuildError,
    )
    assert all(getattr(errors, cls.__name__) is cls for cls in moved)
    assert pyspec.InvalidInputError is errors.InvalidInputError


def test_every_class_is_exported_from_the_top_level():
    # A caller catches what pyspec raises as pyspec.<Name>, without knowing which module
    # raised it: pyspec.ClosedError after close(), pyspec.LlamaBuildError from install-llama.
    classes = {
        name
        for name, v in vars(errors).items()
        if isinstance(v, type) and issubclass(v, Exception) and v.__module__ == errors.__name__
    }
    assert classes <= set(pyspec.__all__), sorted(classes - set(pyspec.__all__))
    assert all(getattr(pyspec, name) is getattr(errors, name) for name in classes)


def test_refused_values_are_invalid_input_and_still_value_errors():
    from pyspec.llama.options import check_draft_range, memory_size

    with pytest.raises(errors.InvalidInputError, match=r"draft_max <= 64"):
        check_draft_range(0, 65)
    with pytest.raises(ValueError, match="memory must be"):
        memory_size(-1)
    with pytest.raises(errors.InvalidInputError, match="n_threads must be"):
        pyspec.verify(np.zeros((1, 4), np.float32), [], n_threads=10_000)
    with pytest.raises(errors.PyspecError) as info:
        errors.raise_for_status(int(pyspec._native.abi.Status.CUDA), "device 3 does not exist")
    assert type(info.value) is errors.InvalidInputError and info.value.status == 10


def test_no_cuda_is_a_runtime_condition():
    if pyspec.cuda.cuda_available():
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(errors.CudaUnavailableError, match="CUDA"):
        pyspec.cuda.backend.require()
