"""The two figures the README takes from outside pytest-benchmark, written in the same shape
(``datetime``, ``machine_info``, then the figures) so their sections say when and on what
they were measured:

- ``llama-build.json``: how long ``pyspec install-llama`` took (its ``build.json`` in
  ``~/.cache/pyspec/llama-build/``);
- ``test-run.json``: the test suite's counts and time, from the summary line pytest prints
  last (``N passed, M skipped in S s``).

Standard library only, like the rest of readme_tables.py. ``pyspec/tools/machine.py`` is loaded
by path: importing the pyspec package would load its compiled library.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _machine_module():
    spec = importlib.util.spec_from_file_location(
        "_pyspec_machine", REPO / "pyspec" / "tools" / "machine.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mtime_iso(path: Path) -> str:
    return datetime.datetime.fromtimestamp(path.stat().st_mtime, datetime.timezone.utc).isoformat(
        timespec="seconds"
    )


def llama_build_record(cache: Path) -> dict:
    """The newest build.json under cache/llama-build/. A build.json older than its
    datetime/machine_info fields is dated by its file and described by this machine (take
    it on the machine that built it)."""
    builds = sorted(cache.glob("llama-build/*/build.json"), key=lambda p: p.stat().st_mtime)
    if not builds:
        raise SystemExit(
            f"readme_tables: no build.json under {cache}/llama-build (run `pyspec install-llama`)"
        )
    data = json.loads(builds[-1].read_text())
    data.setdefault("datetime", _mtime_iso(builds[-1]))
    data.setdefault("machine_info", _machine_module().machine_info())
    return data


_SUMMARY = re.compile(r"^=*\s*(?P<counts>(?:\d+ \w+(?:, )?)+) in (?P<seconds>[\d.]+)s")


def suite_run_record(log: Path) -> dict:
    """Counts and seconds from the last pytest summary line of a log of the whole suite."""
    found = None
    for line in log.read_text(errors="replace").splitlines():
        match = _SUMMARY.match(line.strip())
        if match:
            found = match
    if found is None:
        raise SystemExit(f"readme_tables: {log} has no pytest summary line ('N passed ... in S s')")
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", found.group("counts"))}
    return {
        "datetime": _mtime_iso(log),
        "machine_info": _machine_module().machine_info(),
        "counts": counts,
        "seconds": float(found.group("seconds")),
    }
