"""Reading back the marker strings pyspec's patches to llama.cpp compile into its library
(the AMX fix's, the Q4_K kernel's): ``pyspec AMX tile-config fix version N`` and the like,
so a patched build is told from an unpatched one whatever cache the wheel came from."""

from __future__ import annotations

import re
from pathlib import Path


def marker_version_in(library: Path, marker: re.Pattern) -> int:
    """The highest version a pyspec marker string (``marker``: bytes, the version as its one
    group) names in this library file; 0 where there is none or the file cannot be read."""
    try:
        found = marker.findall(Path(library).read_bytes())
    except OSError:
        return 0
    return max((int(v) for v in found), default=0)
