"""``Round``: what one round of the speculative loop observed.

The loop (``Speculation.generate``) fills one per round; the cost model
(``DraftLengthController.observe``) and the statistics (``SpeculationStats.add_round``)
read it, and the offline replay (``pyspec.testing.replay``) fills the same record from a
recorded generation, so the replay and the loop cannot drift apart in what they report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Optional


@dataclass
class Round:
    """One round: drafts offered and verified, the target pass, what was emitted, times."""

    bucket: Hashable = None  # the kind of draft (Draft.bucket), the key of its acceptance
    offered: int = 0  # drafts offered for verification (after the cost model's cut)
    verified: int = 0  # drafts verified (a grammar may have cut some of the offered)
    accepted: int = 0  # drafts accepted
    emitted: int = 1  # tokens the round emitted (accepted + corrective or bonus)
    batch: int = 1  # tokens in the target's forward pass
    target_seconds: float = 0.0  # the forward pass
    verify_seconds: float = 0.0  # the fused verifier (or reading the in-graph samples)
    draft_seconds: float = 0.0  # wall time in the drafter
    # A costly drafter's (draft model's) tokens and their steady time, without a first call's
    # catch-up; 0 for a free drafter, whose cost the controller does not model.
    drafter_tokens: int = 0
    drafter_seconds: float = 0.0
    # Tokens a costly drafter evaluated before drafting (it had not seen them), and the time.
    catch_up_tokens: int = 0
    catch_up_seconds: float = 0.0
    round_seconds: float = 0.0  # the whole round, bookkeeping included
    # A plain round of a drafter that drafted anyway: whether its first draft token is the
    # token the round emitted (an acceptance observation for free); None otherwise.
    shadow_match: Optional[bool] = None
    # The kind of each offered draft token (Draft.token_kinds; empty: the bucket's), and the
    # tokens the cost model expected the round to emit (0 for a plain round).
    token_kinds: tuple = ()
    predicted: float = 0.0
    costly: bool = False  # drafted by the costly drafter (beside a free one: combined.py)
    # The free drafter's draft was held back because the target was unsure of its last
    # tokens (the unsure rule, DraftLengthController.unsure_below).
    held_back: bool = False
    # Its draft was verified as a sure copy: the sure-copy rule believed it
    # (DraftLengthController.sure_above).
    sure_copy: bool = False
    # Leading drafts the remembered-copy rule believed (DraftLengthController.
    # remembered_floor): text earlier requests held twice or more, an answer once at least.
    # 0: the rule did not decide.
    remembered: int = 0
    # Leading drafts the reproduction rule believed (DraftLengthController.reproduced_floor):
    # the continuation of prompt text the answer reproduces (from its first token or its
    # first code fence). 0: the rule did not decide.
    reproduced: int = 0

    @property
    def speculative(self) -> bool:
        return self.verified > 0
