"""Where pyspec keeps what it builds and learns: ``~/.cache/pyspec`` or ``$PYSPEC_CACHE``."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "PYSPEC_CACHE"


def cache_dir() -> Path:
    """The cache root: llama.cpp builds, the in-graph sampler library, the cost curves and
    the test models live in folders under it."""
    root = os.environ.get(CACHE_ENV)
    return Path(root) if root else Path.home() / ".cache" / "pyspec"
