"""The ABI's numbers in Python come from pyspec.h, and none is typed by hand in the package.

The header is parsed here with a regular expression, independently of cffi, so a binding
that read it wrongly (or a value typed by hand again) fails.
"""

import ast
import re
from pathlib import Path

import pyspec
from pyspec import errors
from pyspec._native import abi as _abi
from pyspec.arrays import device as _device_arrays
from pyspec.arrays import host as _arrays

ROOT = Path(__file__).resolve().parents[1]
HEADER = ROOT / "csrc" / "pyspec.h"
PACKAGE = ROOT / "pyspec"


def header_enum(c_name: str) -> dict:
    """{NAME: value} of `typedef enum c_name { ... }` in pyspec.h."""
    body = re.search(r"typedef enum " + c_name + r" \{(.*?)\}", HEADER.read_text(), re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    return {name: int(value) for name, value in re.findall(r"(PYSPEC_\w+)\s*=\s*(\d+)", body)}


def test_enums_equal_the_header():
    status = header_enum("pyspec_status")
    assert {m.name: m.value for m in _abi.Status} == {
        n.replace("PYSPEC_ERR_", "").replace("PYSPEC_", ""): v for n, v in status.items()
    }
    assert status["PYSPEC_ERR_SHAPE"] == _abi.Status.SHAPE == 2  # a few known names
    assert status["PYSPEC_ERR_DTYPE"] == _abi.Status.DTYPE == 7
    assert status["PYSPEC_ERR_CUDA"] == _abi.Status.CUDA == 10
    assert {m.name: m.value for m in _abi.Dtype} == {
        n.replace("PYSPEC_", ""): v for n, v in header_enum("pyspec_dtype").items()
    }
    assert {m.name: m.value for m in pyspec.Purpose} == {
        n.replace("PYSPEC_PURPOSE_", ""): v for n, v in header_enum("pyspec_purpose").items()
    }
    limits = header_enum("pyspec_limits")
    assert _abi.MAX_PENALTY_WINDOW == limits["PYSPEC_MAX_PENALTY_WINDOW"] == 8192
    assert _abi.MAX_PENALTY == limits["PYSPEC_MAX_PENALTY"]


def test_python_codes_are_the_enums():
    assert (
        errors.LogitsError.status,
        errors.DraftProbsError.status,
        errors.CapacityError.status,
    ) == (_abi.Status.LOGITS, _abi.Status.DRAFT_PROBS, _abi.Status.CAPACITY)
    assert _device_arrays.LOGIT_CODES == {
        "float32": _abi.Dtype.F32,
        "float16": _abi.Dtype.F16,
        "bfloat16": _abi.Dtype.BF16,
    }
    assert _arrays.dtype_code("bf16") is _abi.Dtype.BF16


_ERRORS = {
    name
    for name, value in vars(errors).items()
    if isinstance(value, type) and issubclass(value, Exception)
} | {"raise_for_status"}
_DTYPE_KEYS = {"float32", "float16", "bfloat16", "f32", "f16", "bf16"}


def _is_int(node) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int)
        and not isinstance(node.value, bool)
    )


def _ints(node) -> list:
    """The int values written in an expression (-1 is one value, not 1)."""
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return [v.value for v in ast.walk(node) if _is_int(v)]
    values = value if isinstance(value, (tuple, list)) else [value]
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool)]


def _literals(tree: ast.AST):
    """(line, what) of every status code, dtype code or limit typed as a number."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = (
                node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            )
            args = node.args[1:] + [k.value for k in node.keywords if k.arg == "status"]
            if func in _ERRORS and any(_is_int(a) for a in args):
                yield node.lineno, f"{func}(..., <int>)"
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            if node.value is None:
                continue
            ints = _ints(node.value)
            # PyspecError's default status -1 means "not a pyspec_status" and is not a code.
            if any("status" in n.lower() for n in names) and any(v != -1 for v in ints):
                yield node.lineno, f"{names} = <int>"
            if {"F32", "F16", "BF16"} & set(names) and ints:
                yield node.lineno, f"{names} = <int>"
        elif isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            np_dtype_keys = any(
                isinstance(k, ast.Call) and getattr(k.func, "attr", "") == "dtype"
                for k in node.keys
            )
            codes = [v.value for v in node.values if _is_int(v)]
            # A map to dtype codes (not one to element sizes, such as ITEMSIZE).
            if (keys & _DTYPE_KEYS or np_dtype_keys) and codes and set(codes) <= set(_abi.Dtype):
                yield node.lineno, "{dtype: <int>}"
        # A limit's value in an expression about penalties (elsewhere, 8192 may well be a
        # context size).
        if isinstance(node, (ast.Compare, ast.keyword, ast.Call, ast.Assign)):
            words = [
                getattr(n, "id", None) or getattr(n, "attr", None) or getattr(n, "arg", None)
                for n in ast.walk(node)
            ]
            if any(w and "penalty" in w.lower() for w in words):
                for v in ast.walk(node):
                    if (
                        isinstance(v, ast.Constant)
                        and isinstance(v.value, (int, float))
                        and v.value in (_abi.MAX_PENALTY_WINDOW, _abi.MAX_PENALTY)
                    ):
                        yield v.lineno, f"the limit {v.value}"
            # ... and the draft-length limit in one about draft lengths ("le=64", "<= 64").
            if any(w and w.lower() in ("draft_max", "draft_min", "le") for w in words):
                for v in ast.walk(node):
                    if _is_int(v) and v.value == _abi.MAX_DRAFT:
                        yield v.lineno, f"the limit {v.value}"


def test_no_status_dtype_or_limit_is_typed_by_hand():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).as_posix() == "_native/abi.py":
            continue
        for line, what in sorted(set(_literals(ast.parse(path.read_text(), str(path))))):
            found.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    assert not found, "use pyspec._native.abi (Status, Dtype, the limits) instead:\n" + "\n".join(
        found
    )


def test_the_scan_finds_what_it_looks_for():
    bad = (
        'raise PyspecError("x", 7)\n_SHAPE_STATUS = 2\nF32, F16, BF16 = 0, 1, 2\n'
        'm = {"float32": 0}\np = Params(penalty_last_n=min(n, 8192))\n'
        'PyspecError("x", status=3)\nok = -1 <= penalty_last_n <= 8192\nMAX_PENALTY = 1e6\n'
        "ok = 0 <= draft_min <= draft_max <= 64\n"
    )
    assert len(set(_literals(ast.parse(bad)))) == 9
    good = (
        'raise PyspecError("x", Status.DTYPE)\nstatus = -1\nm = {"float32": Dtype.F32}\n'
        'rows = logits_rows(x, "x", 1)\nn_ctx = 8192\nsize = {"float32": 4, "bf16": 2}\n'
    )
    assert not list(_literals(ast.parse(good)))
