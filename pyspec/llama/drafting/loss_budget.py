"""What a costly drafter may lose against plain decoding before it has shown that it pays.

A draft model costs time before it can draft (catching up on every token it has not seen:
the prompt, a plain stretch), while it drafts, and in the longer verify pass; whether that
pays depends on the machine's batch costs and on the text. The cost model predicts it, but
a prediction is made from estimates, and on a machine where batches are dear one bad
prediction (a long prompt caught up for one probe) is already a loss the user sees.

So every speculative round of a costly drafter is settled against plain decoding:
``loss = round seconds - emitted tokens x p``, with ``p`` the realised seconds per token of
the plain rounds (negative: the round paid). A balance in seconds earns ``FRACTION`` of
the plain-decoding time of every token emitted and pays every loss; a speculative round is
allowed only while the balance covers its worst case (nothing accepted: the catch-up, the k
draft tokens, and the verify pass over k + 1 tokens instead of 1). Hence, over everything
the drafter has done, the time spent is at most ``(1 + FRACTION)`` times plain decoding's
(about 0.97x plain or better), plus at most one round's misestimate; a drafter that pays
earns with every good round and is never held back by it.

The balance is carried from request to request and, through the cost cache, from process to
process (at most ``CARRY_CAP`` seconds of it). What it banks from gains is capped (``CAP``
seconds, or the 3% earned so far if that is more), so that a drafter that paid for a long
time and then stops paying (other text, other load) is stopped soon.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

FRACTION = 0.03  # a costly drafter may cost at most 3% over plain decoding
CAP = 2.0  # seconds of gains a drafter can bank beyond the 3% it earned
CARRY_CAP = 5.0  # seconds of balance a process takes over from the last one


@dataclass
class LossBudget:
    balance: float = 0.0  # seconds the drafter may still lose
    fraction: float = FRACTION
    cap: float = CAP
    lost: float = 0.0  # what speculative rounds lost in total (negative: gained)
    plain_equivalent: float = 0.0  # plain decoding's time for every token emitted
    rounds: int = 0  # speculative rounds settled
    speculative_plain: float = 0.0  # plain decoding's time for their tokens
    speculative_seconds: float = 0.0  # and their own

    @property
    def speculative_gain(self) -> Optional[float]:
        """Plain decoding's time over the speculative rounds' own, for the same tokens."""
        return self.speculative_plain / self.speculative_seconds if self.rounds else None

    def earn(self, plain_seconds: float) -> None:
        """Tokens emitted that plain decoding would have spent plain_seconds on."""
        if plain_seconds > 0:
            self.plain_equivalent += plain_seconds
            self._add(self.fraction * plain_seconds)

    def settle(self, seconds: float, emitted: int, plain_per_token: Optional[float]) -> None:
        """A speculative round of the drafter: its whole time against plain decoding's."""
        if not plain_per_token:
            return
        plain = emitted * plain_per_token
        self.earn(plain)
        self.rounds += 1
        self.speculative_plain += plain
        self.speculative_seconds += seconds
        loss = seconds - plain
        self.lost += loss
        self._add(-loss)

    def _add(self, seconds: float) -> None:
        """Losses always count; gains only up to the cap (a carried balance above it is
        spent, not cut)."""
        cap = max(self.cap, self.fraction * self.plain_equivalent)
        grown = self.balance + seconds
        self.balance = grown if seconds <= 0 or grown <= cap else max(cap, self.balance)

    def affords(self, worst_case_loss: float) -> bool:
        return worst_case_loss <= self.balance

    def describe(self) -> str:
        ratio = ""
        if self.plain_equivalent > 0:
            spent = max(self.plain_equivalent + self.lost, 1e-9)
            ratio = f", so far {self.plain_equivalent / spent:.2f}x plain decoding's speed"
        return f"loss budget {1000 * self.balance:.0f} ms{ratio}"
