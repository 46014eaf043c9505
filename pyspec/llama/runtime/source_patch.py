"""The steps pyspec's kernels for llama.cpp share when they patch its vendored sources
(``q4k_kernel.py``, ``q6k_kernel.py``): exact text replacements that a source they were not
written for refuses, and the header copied beside the patched file only once the patch holds,
so a tree is patched whole or left as it was."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from pyspec.errors import LlamaBuildError


def replace_once(text: str, old: str, new: str, *, what: str, kernel: str, file: str) -> str:
    """text with ``old`` (which must occur exactly once) replaced by ``new``."""
    count = text.count(old)
    if count != 1:
        raise LlamaBuildError(
            f"pyspec's {kernel}: expected {what} once in {file}, found it {count} times: "
            "this llama.cpp is not the one the kernel is for"
        )
    return text.replace(old, new)


def patch_tree(
    source_dir: Path,
    source: Path,
    header: Path,
    header_dest: Path,
    patch_source: Callable[[str], str],
) -> Path:
    """Applies ``patch_source`` to ``source`` and copies ``header`` to ``header_dest`` (both
    relative to an unpacked llama-cpp-python sdist), in place; returns the patched file."""
    path = Path(source_dir) / source
    if not path.is_file():
        raise LlamaBuildError(f"{path} not found: not a llama-cpp-python source tree")
    dest = Path(source_dir) / header_dest
    if not dest.parent.is_dir():
        raise LlamaBuildError(f"{dest.parent} not found: this llama.cpp has no x86 sources")
    patched = patch_source(path.read_text())  # (raises before anything is written)
    dest.write_text(Path(header).read_text())
    path.write_text(patched)
    return path
