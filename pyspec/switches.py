"""Environment switches: one reading of "off" and "on" for every ``PYSPEC_*`` variable that
turns something off (the cost cache, huge pages) or on (an override)."""

from __future__ import annotations

import os

OFF_WORDS = ("0", "off", "no", "false")
ON_WORDS = ("1", "on", "yes", "true")


def switched_off(name: str) -> bool:
    """True when the variable ``name`` says off; unset or anything else leaves the default on."""
    return os.environ.get(name, "").strip().lower() in OFF_WORDS


def switched_on(name: str) -> bool:
    """True when the variable ``name`` says on; unset or anything else leaves the default off."""
    return os.environ.get(name, "").strip().lower() in ON_WORDS
