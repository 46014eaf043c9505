"""The target's measured forward cost per batch size, kept on disk per model and setup.

Calibrating decodes a dozen throw-away batches (1.6 s for Qwen2.5-Coder 1.5B on 2 cores), so
a short first request would pay for it in full, on every start of a program. The costs are
therefore kept in ``~/.cache/pyspec/costs/`` (``PYSPEC_CACHE`` moves the root; set
``PYSPEC_COST_CACHE=off`` to always measure afresh), one small JSON file per model file
(path, size, modification time), llama.cpp threads and batch size, CPU and llama-cpp-python
version. A later process starts from them; as after a fresh calibration, the first real
one-token pass rescales them to the load of the moment, and real passes replace each size
as it is used.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
from pathlib import Path
from typing import Optional

from ..models import cache_dir

log = logging.getLogger("pyspec")


def calibration_sizes(draft_max: int) -> list:
    """The batch sizes whose cost is measured: the largest verify batch (draft_max + 1) and
    the sizes 1, 2, 3, 5, 9, 17, 33 below it (between them the cost is interpolated)."""
    top = draft_max + 1
    return sorted({n for n in (1, 2, 3, 5, 9, 17, 33) if n < top} | {top})


def cost_cache_file(llama, sizes) -> Optional[Path]:
    """Where the costs of this model and setup live (None when the cache is off or the
    model file is unknown)."""
    if os.environ.get("PYSPEC_COST_CACHE", "").lower() in ("0", "off", "no", "false"):
        return None
    model = getattr(llama, "model_path", None)
    try:
        st = os.stat(model)
    except (TypeError, OSError):
        return None
    import llama_cpp

    params = llama.context_params
    key = dict(model=os.path.realpath(model), size=st.st_size, mtime_ns=st.st_mtime_ns,
               n_threads=params.n_threads, n_threads_batch=params.n_threads_batch,
               n_batch=llama.n_batch, n_ubatch=params.n_ubatch, sizes=sorted(sizes),
               cpu=platform.processor() or platform.machine(), cpus=os.cpu_count(),
               llama_cpp=llama_cpp.__version__)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return cache_dir() / "costs" / f"{Path(model).stem}-{digest}.json"


def load_costs(path: Optional[Path]) -> Optional[dict]:
    """The cached costs (batch size -> seconds), or None if there are none (or they are
    unreadable: then they are measured again)."""
    if path is None or not path.is_file():
        return None
    try:
        costs = {int(n): float(s) for n, s in json.loads(path.read_text())["costs"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        log.warning("pyspec: ignoring an unreadable cost cache %s", path)
        return None
    if not costs or any(s <= 0 for s in costs.values()):
        return None
    return costs


def save_costs(path: Optional[Path], costs: dict) -> None:
    """Writes the costs atomically; a cache that cannot be written is only a lost shortcut."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"costs": {str(n): s for n, s in sorted(costs.items())}}))
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("pyspec: could not write the cost cache %s: %s", path, exc)
