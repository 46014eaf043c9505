"""The shape of the target's batch-cost curve, kept on disk per model and setup.

Costs are learned online (``costs.BatchCosts``); what an earlier process learned about how
batching scales on this machine (cost(n) / cost(1), which does not change with the load of
the moment) is a better prior than the default curve, so it is kept in
``~/.cache/pyspec/costs/`` (``PYSPEC_CACHE`` moves the root; ``PYSPEC_COST_CACHE=off`` turns
the cache off), one small JSON file per model file (path, size, modification time),
llama.cpp threads and batch size, CPU, llama-cpp-python version and build (its CPU features:
an AMX build batches far more cheaply).

A cache cannot poison later runs: a file is validated on load (``costs.validate_ratios``:
finite, plausible, no steep dips; a corrupt or implausible file is ignored with one warning), it
is only a prior that live passes override, and it is dropped when the first live passes of a
size disagree with it by more than 2x. Only sizes with several live passes are written, and
none over a calibrated shape (``BatchCosts.shape_to_save``).
A file may also hold a shape measured at every size (``calibration.py``; ``calibrated`` in
the file, with the statistic it kept per size), whose dips between sizes the cost model then
believes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import os
import platform
import re
from numbers import Real
from pathlib import Path
from typing import Optional

from pyspec.cache import cache_dir
from pyspec.errors import InvalidInputError
from pyspec.llama.drafting.costs import every_size_from_2, ratios_from, validate_ratios
from pyspec.switches import switched_off

# How calibration.py keeps a size's passes. A file calibrated by another statistic (until
# session 24 the fastest pass, which believed the luckiest sizes cheap) is read as a plain
# prior, not calibrated, so the next `pyspec generate` or `serve` measures it again.
CALIBRATION_STATISTIC = "median"

log = logging.getLogger("pyspec")
FORMAT = 2  # 1: absolute seconds per size (sessions before the online cost model)


def cache_enabled() -> bool:
    return not switched_off("PYSPEC_COST_CACHE")


def _model_key(llama) -> Optional[dict]:
    model = getattr(llama, "model_path", None)
    try:
        st = os.stat(model)
    except (TypeError, OSError):
        return None
    return dict(model=os.path.realpath(model), size=st.st_size, mtime_ns=st.st_mtime_ns)


def cost_cache_file(llama) -> Optional[Path]:
    """Where the batch-cost shape of this model and setup lives (None when the cache is off
    or the model file is unknown)."""
    model = _model_key(llama) if cache_enabled() else None
    if model is None:
        return None
    import llama_cpp

    params = llama.context_params
    key = dict(
        model,
        n_threads=params.n_threads,
        n_threads_batch=params.n_threads_batch,
        n_batch=llama.n_batch,
        n_ubatch=params.n_ubatch,
        # Flash attention changes what attention costs as the context grows (since session 43;
        # a curve measured without it was read with it before).
        flash_attn_type=int(params.flash_attn_type),
        cpu=platform.processor() or platform.machine(),
        cpus=os.cpu_count(),
        llama_cpp=llama_cpp.__version__,
        format=FORMAT,
        # The build's kernels (AMX or not, repacking) shape the curve more than anything.
        build=_system_info(llama_cpp),
        # pyspec's own kernels change the curve without changing the system info.
        **_x86_kernels(),
    )
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return cache_dir() / "costs" / f"{Path(model['model']).stem}-{digest}.json"


@functools.lru_cache(maxsize=1)
def _x86_kernels() -> dict:
    """{"q4k_kernel": version, "q6k_kernel": version} for those of pyspec's kernels the
    installed build has, else {} (so the keys of other builds stay what they were). Read once
    per process."""
    from pyspec.llama.runtime.x86_kernels import installed_versions

    return installed_versions()


def _system_info(llama_cpp) -> str:
    info = llama_cpp.llama_print_system_info()
    return info.decode(errors="replace") if isinstance(info, bytes) else str(info)


def parse_ratios(text: str) -> dict:
    """n -> cost(n) / cost(1) from a cache file's text (raises ValueError when unreadable).
    Sizes and costs are read as strictly as ``use_calibration`` reads a shape
    (``costs.ratios_from``): a cost written as a string or a boolean is a file that
    something else wrote, not a number to convert."""
    data = json.loads(text)
    if not isinstance(data, dict) or not ("ratios" in data or "costs" in data):
        raise InvalidInputError("unexpected layout: no 'ratios' (nor format 1's 'costs')")
    if "ratios" in data:
        values, problem = ratios_from(data["ratios"])
    else:  # format 1: absolute seconds, size 1 included
        raw = data["costs"]
        one = raw.get("1") if isinstance(raw, dict) else None
        if isinstance(one, bool) or not isinstance(one, Real) or not 0 < one < math.inf:
            raise InvalidInputError("format-1 file without a valid one-token cost")
        values, problem = ratios_from(raw)
        values = {n: v / one for n, v in values.items()}
    if problem:
        raise InvalidInputError(f"unexpected layout: {problem}")
    return values


def _calibrated_by(record) -> Optional[str]:
    """The statistic a record's calibrated shape kept per size (records written before the
    statistic was named kept the fastest pass), or None: not calibrated."""
    if not isinstance(record, dict) or record.get("calibrated") is not True:
        return None
    return record.get("statistic", "fastest")


def read_shape(path: Path):
    """(shape, calibrated, '') or (None, False, why the loop ignores the file), from one read
    (``pyspec doctor`` reports all three)."""
    try:
        text = path.read_text()
        ratios = parse_ratios(text)
        calibrated = _calibrated_by(json.loads(text)) == CALIBRATION_STATISTIC
    except (OSError, ValueError) as exc:
        return None, False, f"unreadable ({exc})"
    problem = validate_ratios(ratios, calibrated)
    return (None, False, problem) if problem else (ratios, calibrated, "")


def load_ratios(path: Optional[Path]) -> Optional[dict]:
    """The cached shape, or None (no file, or a file that is ignored with one warning)."""
    return load_shape(path)[0]


def load_shape(path: Optional[Path]):
    """(the cached shape or None, whether it was calibrated at every size); a file that is
    ignored gets one warning."""
    if path is None or not path.is_file():
        return None, False
    ratios, calibrated, problem = read_shape(path)
    if problem:
        log.warning("pyspec: ignoring the cost cache %s: %s", path, problem)
    return ratios, calibrated


def is_calibrated(path: Path) -> bool:
    """Whether the file holds a valid shape measured at every size (``calibration.py``)."""
    return read_shape(path)[1]


def calibrated_the_old_way(path: Optional[Path]) -> bool:
    """Whether the file holds a shape calibrated by another statistic than
    CALIBRATION_STATISTIC (the fastest pass, before session 24): measured again, and said."""
    try:
        statistic = _calibrated_by(json.loads(path.read_text()))
    except (OSError, ValueError):
        return False
    return statistic not in (None, CALIBRATION_STATISTIC)


def save_ratios(path: Optional[Path], ratios: dict, calibrated: bool = False) -> None:
    """Writes the shape atomically if it is plausible; a cache that cannot be written is only
    a lost shortcut. ``calibrated``: measured at every size (calibration.py); the flag is
    kept only for a shape with every size from 2, and a calibrated file is never replaced
    by a shape that is not (a process started with ``--no-calibrate``, or whose live passes
    dropped the calibrated prior, must not undo another's calibration)."""
    calibrated = calibrated and every_size_from_2(ratios)
    if path is None or not ratios or validate_ratios(ratios, calibrated):
        return
    if not calibrated and path.is_file() and read_shape(path)[1]:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        record = {"format": FORMAT, "ratios": {str(n): r for n, r in sorted(ratios.items())}}
        if calibrated:
            record.update(calibrated=True, statistic=CALIBRATION_STATISTIC)
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("pyspec: cannot write the cost cache %s: %s", path, exc)


def drafter_cache_file(target_file: Optional[Path], draft_llama) -> Optional[Path]:
    """Where what was learned about a draft model beside this target and setup lives (the
    loss budget's balance, its costs): next to the target's cost file, keyed by the draft
    model's file too."""
    draft = _model_key(draft_llama)
    if target_file is None or draft is None:
        return None
    digest = hashlib.sha256(json.dumps(draft, sort_keys=True).encode()).hexdigest()[:12]
    return target_file.with_name(f"{target_file.stem}-draft-{digest}.json")


# (drafter_cache_file's names: a target's cost file name ends in 20 hex digits instead)
_DRAFTER_RECORD_NAME = re.compile(r"-draft-[0-9a-f]{12}\.json$")


def is_drafter_record(path: Path) -> bool:
    """Whether ``path`` names a draft model's record (``drafter_cache_file``) rather than a
    target's batch costs."""
    return bool(_DRAFTER_RECORD_NAME.search(path.name))


def read_drafter_record(path: Path):
    """(the record, '') or ({}, why it is ignored), from one read."""
    try:
        record = json.loads(path.read_text())
        clean = {
            k: (None if record.get(k) is None else float(record[k]))
            for k in (
                "balance",
                "draft_cost_ratio",
                "catch_up_ratio_one",
                "catch_up_ratio_long",
                "speculative_gain",
                "speculative_rounds",
            )
        }
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        return {}, f"unreadable ({exc})"
    if any(v is not None and (not math.isfinite(v) or not -1e6 < v < 1e6) for v in clean.values()):
        return {}, "implausible values"
    return {k: v for k, v in clean.items() if v is not None}, ""


def load_drafter_record(path: Optional[Path]) -> dict:
    """The record, or {} (no file; an unreadable or implausible one, with one warning)."""
    if path is None or not path.is_file():
        return {}
    record, problem = read_drafter_record(path)
    if problem:
        log.warning("pyspec: ignoring the drafter record %s: %s", path, problem)
    return record


def save_drafter_record(path: Optional[Path], record: dict) -> None:
    if path is None or not record:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("pyspec: cannot write the drafter record %s: %s", path, exc)
