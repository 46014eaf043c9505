"""Adaptive draft length from a cost model.

With per-token acceptance rate a, a round that drafts k tokens emits on average
E(k) = (1 - a^(k+1)) / (1 - a) tokens (Leviathan et al. 2023) and costs
T(k) = target(k + 1) + k * draft_per_token + overhead, where target(n) is the measured
cost of a target forward pass over n tokens. The controller picks the k in
{0} u [draft_min, draft_max] that maximises E(k) / T(k); k = 0 is plain decoding, so
speculation is never planned to be slower than not speculating.

Everything is measured online, from the rounds the loop runs anyway (no calibration
batches): target(n) per batch size (``costs.BatchCosts``: medians over recent passes, a
prior batch curve for sizes not yet measured, monotone in n), the drafter's cost per token,
and the acceptance rate per kind of draft (censored-geometric estimate: accepted / (accepted
+ rejections), with counts that decay per round).

While k = 0 wins, the acceptance estimate must still be able to recover when the text becomes
predictable again. A free drafter (prompt lookup) drafts every round anyway, so a plain round
checks its draft's first token against the token the round emitted (``record_shadow``): a
point-mass draft d is accepted with the target's probability of d, which is exactly the
probability that the plain round emits d, so the check is an unbiased acceptance observation
that costs nothing. A costly drafter (a draft model) cannot be watched for free: after
`explore_every` plain rounds a short speculative round probes it, and each probe that does not
change the decision doubles that interval.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .costs import BatchCosts
from .rounds import Round

MAX_EXPLORE_INTERVAL = 256
WARMUP_PLAIN_ROUNDS = 3
PROBE_LENGTH = 2
# The acceptance estimate behind each decision counts half a failure more than it saw: a
# handful of lucky matches alone does not license a long draft (on Gemma 270M a failed draft
# of 8 costs 4 tokens' time), while beside the counts of a long copy (a round that passes 16
# drafts adds 16) the half weighs little.
PESSIMISM = 0.5


@dataclass(frozen=True)
class WatchPolicy:
    """How the controller keeps an eye on a drafter while plain decoding wins."""

    # Plain rounds report their draft's first token (Round.shadow_match): no probes, and no
    # veto from realised rates, which could never be lifted without speculative rounds.
    shadowed: bool = False
    # Plain rounds before a probe (a short speculative round), doubling after each probe that
    # does not change the decision.
    explore_every: int = 16
    # Whether a drafter measured slower than plain is still probed.
    probe_after_veto: bool = True


# A free drafter (prompt lookup) drafts every round anyway: watched through its shadow.
FREE_DRAFTER = WatchPolicy(shadowed=True, explore_every=16, probe_after_veto=True)
# A costly drafter (a draft model) must catch up on every token of a plain stretch before it
# can draft, so a probe costs more the longer it waited: probed rarely, and never again once
# measured slower than plain.
COSTLY_DRAFTER = WatchPolicy(shadowed=False, explore_every=48, probe_after_veto=False)


class DraftLengthController:
    def __init__(self, draft_min: int = 1, draft_max: int = 16, *, ema: float = 0.15,
                 prior_acceptance: float = 0.6, fixed: bool = False,
                 watch: WatchPolicy = WatchPolicy()):
        if not 0 <= draft_min <= draft_max:
            raise ValueError(f"need 0 <= draft_min <= draft_max, got {draft_min}, {draft_max}")
        self.draft_min, self.draft_max = max(1, draft_min), draft_max
        self.allow_zero = draft_min == 0 or not fixed
        self.fixed = fixed
        self.ema = ema
        self.watch = watch
        self.costs = BatchCosts(max_n=draft_max + 1)
        self.last_reason = "no round yet"  # why the last round drafted what it drafted
        # The first rounds decode plainly: they measure a real one-token pass and the plain
        # throughput that speculative rounds are then held against.
        self._warmup_plain = WARMUP_PLAIN_ROUNDS
        self.draft_cost = 0.0        # seconds per drafted token
        # Seconds a speculative round spends outside the target and the drafter beyond what a
        # plain round spends there (verifying k + 1 rows instead of sampling one, removing
        # rejected KV cells): measured for both kinds of round, the difference is charged.
        self.overhead = 0.0
        self._round_overhead: dict = {}  # speculative (bool) -> seconds (EMA)
        self.prior = prior_acceptance
        self._counts: dict = {}  # bucket -> [successes, failures]
        self._plain_streak: dict = {}
        self._explore_interval: dict = {}
        self._probing: dict = {}     # bucket -> length of the probe now being verified
        self._probe_next: dict = {}  # bucket -> length of the follow-up probe it earned
        # Slow start after a rejection: the next draft of the bucket is at most twice the
        # tokens the last one got accepted (at least 2), and the limit doubles with every
        # round that passes in full. A copy the output has just left (sampled text wanders
        # off its source at random) is not trusted with 16 drafts at once again.
        self._limit: dict = {}       # bucket -> largest draft length for now
        self._realised: dict = {}  # (bucket, speculative) -> recent rounds' tokens/s
        self._veto_cost: Optional[float] = None  # one-token cost when a veto began

    # ---- measurements ---------------------------------------------------------------
    def observe(self, r: Round) -> None:
        """Learns from one round of the loop (or of a replay): the target's cost for the
        batch, the drafter's cost, the acceptance of the draft's kind, the round's realised
        rate and overhead, and a plain round's shadow check."""
        self.record_draft(r.drafter_tokens, r.drafter_seconds)
        self.record_target(r.batch, r.target_seconds)
        self.record_acceptance(r.offered, r.accepted, r.bucket)
        self.record_round(r.bucket, r.speculative, r.emitted, r.round_seconds)
        self.record_overhead(r.speculative, r.round_seconds - r.target_seconds - r.draft_seconds)
        if r.shadow_match is not None and self.watch.shadowed:
            self.record_shadow(r.shadow_match, r.bucket)

    def _avg(self, old, new):
        return new if old is None else old + self.ema * (new - old)

    def record_target(self, n_tokens: int, seconds: float) -> None:
        """A timed forward pass of the target over n_tokens (every round has one)."""
        self.costs.observe(n_tokens, seconds)

    def use_cost_prior(self, ratios: dict, source: str = "cache") -> None:
        """Starts the batch curve from a known shape (n -> cost(n) / cost(1)); validate it
        with ``costs.validate_ratios`` first. Live passes override it."""
        self.costs.use_prior(ratios, source)

    def record_draft(self, n_drafted: int, seconds: float) -> None:
        if n_drafted:
            self.draft_cost = self._avg(self.draft_cost or None, seconds / n_drafted)

    def record_overhead(self, speculative: bool, seconds: float) -> None:
        """Time a round spent outside the target's forward pass and the drafter."""
        self._round_overhead[speculative] = self._avg(self._round_overhead.get(speculative), seconds)
        if True in self._round_overhead and False in self._round_overhead:
            self.overhead = max(self._round_overhead[True] - self._round_overhead[False], 0.0)

    def record_round(self, bucket, speculative: bool, n_tokens: int, seconds: float) -> None:
        """Realised throughput of a whole round (drafting, forward pass, verify, bookkeeping),
        kept apart for plain rounds and for speculative rounds of each bucket."""
        key = (bucket, True) if speculative else (None, False)
        window = self._realised.get(key)
        if window is None:
            window = self._realised[key] = deque(maxlen=9)
        window.append(n_tokens / max(seconds, 1e-9))

    def _realised_says_plain(self, bucket) -> bool:
        """True once enough speculative rounds of this bucket ran measurably slower than
        plain rounds: the model's prediction is overruled by what actually happened (costs
        it does not see, such as a draft model catching up after plain rounds). Medians of
        recent rounds, so one descheduled round cannot cast the veto; and a veto is lifted
        when the one-token cost moves by more than 1.5x (the machine's load changed, and
        with it what pays)."""
        spec = self._realised.get((bucket, True))
        plain = self._realised.get((None, False))
        vetoed = (spec is not None and plain is not None and len(spec) >= 3 and len(plain) >= 3
                  and float(np.median(spec)) < float(np.median(plain)))
        c1 = self.costs.per_token()
        if not vetoed:
            self._veto_cost = None
        elif self._veto_cost is None:
            self._veto_cost = c1
        elif c1 and self._veto_cost and abs(math.log(c1 / self._veto_cost)) > math.log(1.5):
            self._realised.pop((bucket, True), None)  # try the drafter again
            self._veto_cost = None
            return False
        return vetoed

    def _bucket(self, bucket):
        if bucket not in self._counts:
            self._counts[bucket] = [self.prior * 2, (1 - self.prior) * 2]  # weak prior: learn fast
        return self._counts[bucket]

    def record_acceptance(self, n_drafted: int, n_accepted: int, bucket=None) -> None:
        """`bucket` separates contexts whose acceptance differs (a lookup's match length)."""
        if n_drafted == 0:
            return
        if n_accepted < n_drafted:
            self._limit[bucket] = max(2, 2 * n_accepted)
        elif bucket in self._limit:
            self._limit[bucket] = min(2 * max(self._limit[bucket], n_drafted), self.draft_max)
        probe = self._probing.pop(bucket, None)
        if probe is not None and n_drafted == probe and n_accepted == n_drafted:
            self._probe_next[bucket] = 2 * probe
        decay = 1 - self.ema / 2
        counts = self._bucket(bucket)
        counts[0] = counts[0] * decay + n_accepted
        counts[1] = counts[1] * decay + (1 if n_accepted < n_drafted else 0)

    def new_request(self, weight: float = 4.0) -> None:
        """A new text: what was learned about acceptance on the last one is only a prior
        (how much of a text a drafter guesses depends on the text: a request that copies is
        often followed by one that writes something new). Each bucket's counts are scaled
        down to `weight` observations, keeping their ratio, and its drafts restart short (the
        slow-start limit of 2), so the new text's first rejections count at once; measured
        costs are kept."""
        for counts in self._counts.values():
            total = counts[0] + counts[1]
            if total > weight:
                counts[0] *= weight / total
                counts[1] *= weight / total
        self._limit = {bucket: 2 for bucket in self._counts}

    def record_shadow(self, matched: bool, bucket=None) -> None:
        """A plain round's free draft, checked against the token the round emitted: `matched`
        is the acceptance event of a one-token draft (same probability, nothing verified),
        recorded as such."""
        self.record_acceptance(1, 1 if matched else 0, bucket)

    # ---- model ------------------------------------------------------------------------
    def acceptance(self, bucket=None) -> float:
        s, f = self._bucket(bucket)
        return s / (s + f + PESSIMISM)

    def predicted_target(self, n: int) -> float:
        """Seconds the target's forward pass over n tokens is believed to cost now."""
        return self.costs.predict(n)

    def expected_tokens(self, k: int, bucket=None) -> float:
        a = min(self.acceptance(bucket), 0.999)
        return (1 - a ** (k + 1)) / (1 - a)

    def rate(self, k: int, bucket=None, *, draft_cost: Optional[float] = None) -> float:
        """Predicted tokens per second when drafting k (draft_cost: seconds per draft token;
        0 for drafts already in hand)."""
        per_token = self.draft_cost if draft_cost is None else draft_cost
        cost = self.predicted_target(k + 1) + k * per_token + (self.overhead if k else 0.0)
        return self.expected_tokens(k, bucket) / cost

    def choose(self, limit: int, bucket=None, *, draft_cost: Optional[float] = None) -> int:
        """The draft length for the next round: at most `limit` (context room left, or the
        drafts already proposed). ``last_reason`` says why."""
        k, self.last_reason = self._choose(limit, bucket, draft_cost)
        return k

    def _choose(self, limit: int, bucket, draft_cost):
        hi = min(self.draft_max, limit)
        if hi < self.draft_min:
            return 0, f"room for {limit} drafts, below draft_min {self.draft_min}"
        if self.fixed:
            return hi, "fixed draft length"
        hi = max(min(hi, self._limit.get(bucket, hi)), self.draft_min)
        if self._warmup_plain > 0:
            self._warmup_plain -= 1
            return 0, "warm-up: measuring a one-token pass"
        rate = lambda k: self.rate(k, bucket, draft_cost=draft_cost)  # noqa: E731
        best = max(range(self.draft_min, hi + 1), key=rate)
        why = (f"{bucket or 'draft'}: acceptance {self.acceptance(bucket):.2f}, best k={best} "
               f"predicts {rate(best) / rate(0):.2f}x plain")
        if self.watch.shadowed and draft_cost == 0.0:
            if self.allow_zero and rate(0) >= rate(best):
                return 0, f"plain ({why})"
            return best, why
        vetoed = self._realised_says_plain(bucket)
        if vetoed:
            why += "; but speculative rounds ran slower than plain ones (realised rates)"
        if self.allow_zero and (rate(0) >= rate(best) or vetoed):
            if vetoed and not self.watch.probe_after_veto:
                return 0, f"plain ({why})"
            follow_up = self._probe_next.pop(bucket, None)
            if follow_up is not None:  # the last probe passed in full: probe again, longer
                self._probing[bucket] = min(hi, follow_up)
                return self._probing[bucket], f"probe, after a probe that passed ({why})"
            streak = self._plain_streak.get(bucket, 0) + 1
            self._plain_streak[bucket] = streak
            interval = self._explore_interval.get(bucket, self.watch.explore_every)
            if streak < interval:
                return 0, f"plain ({why}); next probe in {interval - streak} rounds"
            # A cheap probe so the estimates can recover; probes that keep failing to change
            # the decision come ever more rarely, so they cannot make decoding slower.
            self._explore_interval[bucket] = min(2 * interval, MAX_EXPLORE_INTERVAL)
            self._plain_streak[bucket] = 0
            # Drafts already in hand (draft_cost 0) are probed short, so a failed probe costs
            # little; one that passes in full is followed at once by a probe twice as long
            # (record_acceptance), so a real run is confirmed within a few rounds.
            length = min(hi, PROBE_LENGTH) if draft_cost == 0.0 else self.draft_min
            self._probing[bucket] = length
            return length, f"probe ({why})"
        self._plain_streak[bucket] = 0
        self._explore_interval.pop(bucket, None)
        self._probe_next.pop(bucket, None)
        return best, why

    def describe(self) -> str:
        """What the cost model believes now, in one line a user can read."""
        parts = [f"target cost: {self.costs.describe()}"]
        if self.draft_cost:
            parts.append(f"draft {1000 * self.draft_cost:.1f} ms/token")
        if self.overhead:
            parts.append(f"speculative round overhead {1000 * self.overhead:.2f} ms")
        accept = ", ".join(f"{b or 'draft'} {self.acceptance(b):.2f}" for b in sorted(
            self._counts, key=str))
        parts.append(f"acceptance: {accept or 'prior ' + format(self.prior, '.2f')}")
        parts.append(f"last decision: {self.last_reason}")
        return "; ".join(parts)
