"""Calibrates a SpeculativeLlama's batch costs the first time a model and setup is used.

``pyspec generate`` and ``pyspec serve`` call it after loading: when the cost cache has no
shape measured at every size for this model file, build, CPU and thread setup, the curve is
measured now (``SpeculativeLlama.calibrate``, about 20 s for a 1.5B model on 2 cores) and
kept, so later starts skip it. ``--no-calibrate`` skips it; with the cost cache off
(``PYSPEC_COST_CACHE=off``) nothing could keep it, and it is skipped with a line that says so.
"""

from __future__ import annotations

from typing import Callable

from pyspec.errors import PyspecError


def calibrate_once(llm, say: Callable[[str], None]) -> bool:
    """Calibrates ``llm`` unless there is nothing to gain or keep; True when it measured."""
    spec = getattr(llm, "speculation", None)
    if spec is None or spec.controller.fixed or spec.controller.draft_max < 1:
        return False  # plain decoding, or fixed draft lengths: the curve decides nothing
    costs = spec.controller.costs
    if costs.calibrated_up_to(costs.max_n):  # (a shorter draft_max's shape is measured again)
        return False
    if spec.cost_file is None:
        say(
            "pyspec: not calibrating the batch costs: the cost cache is off "
            "(PYSPEC_COST_CACHE), so the measurement could not be kept"
        )
        return False
    say(
        f"pyspec: measuring this model's batch costs at every draft length up to "
        f"{spec.controller.draft_max} (once for this model, build and setup; "
        f"kept in {spec.cost_file.parent}; --no-calibrate skips it)"
    )
    try:
        shape = llm.calibrate(progress=lambda line: say(f"pyspec:   {line}"))
    except PyspecError as exc:  # a busy machine, a context too small: said, not fatal
        say(f"pyspec: calibration failed ({exc}); the cost model learns the curve online")
        return False
    cheap = ", ".join(str(n - 1) for n in sorted(shape) if n > 2 and shape[n] < shape[n - 1])
    say(
        f"pyspec: calibrated; drafts of {cheap} cost less than one draft fewer"
        if cheap
        else "pyspec: calibrated"
    )
    return True
