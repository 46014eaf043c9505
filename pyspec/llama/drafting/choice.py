"""Which drafter pays on this machine: the draft model, or prompt lookup (free).

A draft model pays when its drafts save more target passes than they cost: with per-token
acceptance a, k drafts emit E(k) = (1 - a^(k+1)) / (1 - a) tokens for one verify pass over
k + 1 tokens plus k draft tokens. Both costs are machine facts: the target's batch curve
(cost(n) / cost(1): the cost cache's shape for this model and build, learned by earlier runs,
else the cost model's default prior) and the draft's cost per token relative to the
target's (what an earlier run measured, else the models' size ratio: a one-token decode reads
every weight once). Where an earlier run of this pair on this machine has already shown what
its speculative rounds gained (the loss budget's record), that realised gain decides.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Optional

ASSUMED_ACCEPTANCE = 0.8  # a same-family draft on code and chat (measured 0.8-0.9 here)
PAYS = 1.1  # predicted or realised speedup that makes the draft model the default


@dataclass
class Outlook:
    pays: bool
    speedup: float  # predicted, or realised by an earlier run
    realised: bool
    why: str


def size_ratio(draft_path, target_path) -> Optional[float]:
    """Draft model file size / target file size (None when either is unknown): what a draft
    token costs against a target token before it has been measured (a one-token decode reads
    every weight once)."""
    try:
        return os.path.getsize(draft_path) / os.path.getsize(target_path)
    except (TypeError, OSError, ZeroDivisionError):
        return None


def predicted_speedup(
    batch_ratio, draft_ratio: float, acceptance: float = ASSUMED_ACCEPTANCE, draft_max: int = 16
) -> tuple:
    """(best speedup over plain decoding, its draft length) for batch_ratio(n) = cost(n) /
    cost(1) and draft tokens costing draft_ratio x a one-token target pass."""
    best = (1.0, 0)
    for k in range(1, draft_max + 1):
        emitted = (1 - acceptance ** (k + 1)) / (1 - acceptance)
        speedup = emitted / (batch_ratio(k + 1) + k * draft_ratio)
        best = max(best, (speedup, k))
    return best


def draft_model_outlook(spec, target_path: str, draft_path: str) -> Outlook:
    """What the draft model at ``draft_path`` is expected to gain beside ``spec``'s target
    (a Speculation of that target, whatever its drafter)."""
    from pyspec.llama.drafting.cost_cache import drafter_cache_file, load_drafter_record

    record = load_drafter_record(
        drafter_cache_file(spec._cost_file, SimpleNamespace(model_path=draft_path))
    )
    if record.get("speculative_gain") and record.get("speculative_rounds", 0) >= 20:
        gain = record["speculative_gain"]
        return Outlook(
            gain >= PAYS,
            gain,
            True,
            f"an earlier run's {int(record['speculative_rounds'])} speculative rounds "
            f"with it ran at {gain:.2f}x plain decoding's speed on this machine",
        )
    costs = spec.controller.costs
    ratio = record.get("draft_cost_ratio") or size_ratio(draft_path, target_path) or 1.0
    speedup, k = predicted_speedup(costs.prior, ratio)
    shape = (
        "measured on this machine"
        if costs.has_prior  # (from the cost cache, or calibrated in this process)
        else "not measured here yet: the default curve"
    )
    shown = k or 4  # with no gain at any length, the costs of a draft of 4 say why
    verdict = (
        f"predicted {speedup:.2f}x plain at k={k}" if k else "predicted no gain at any draft length"
    )
    why = (
        f"{verdict}: a verify pass of {shown + 1} tokens costs {costs.prior(shown + 1):.2f}x "
        f"one token ({shape}), a draft token {ratio:.2f}x a target token, acceptance "
        f"{ASSUMED_ACCEPTANCE:.2f} assumed"
    )
    return Outlook(speedup >= PAYS, speedup, False, why)
