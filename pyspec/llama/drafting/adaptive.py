"""Adaptive draft length from a cost model.

With per-token acceptance rate a, a round that drafts k tokens emits on average
E(k) = (1 - a^(k+1)) / (1 - a) tokens (Leviathan et al. 2023) and costs
T(k) = target(k + 1) + k * draft_per_token + overhead, where target(n) is the measured
cost of a target forward pass over n tokens. The controller picks the k in
{0} u [draft_min, draft_max] that maximises E(k) / T(k); k = 0 is plain decoding, so
speculation is never planned to be slower than not speculating.

Everything is measured online, from the rounds the loop runs anyway: target(n) per batch
size (``costs.BatchCosts``: medians over recent passes, a prior batch curve for sizes not yet
measured: monotone in n, or where ``calibration.py`` measured every size once for this model
and setup, that curve with its dips), the drafter's cost per token,
and the acceptance rate per kind of draft (censored-geometric estimate: accepted / (accepted
+ rejections), with counts that decay per round).

While k = 0 wins, the acceptance estimate must still be able to recover when the text becomes
predictable again. A free drafter (prompt lookup) drafts every round anyway, so a plain round
checks its draft's first token against the token the round emitted (``record_shadow``): a
point-mass draft d is accepted with the target's probability of d, which is exactly the
probability that the plain round emits d, so the check is an unbiased acceptance observation
that costs nothing. A costly drafter (a draft model) cannot be watched for free: after
`explore_every` plain rounds a short speculative round probes it, and each probe that does not
change the decision doubles that interval. And every round it drafts is settled against plain
decoding (``loss_budget.LossBudget``): a round whose worst case (its catch-up on the tokens
the drafter has not seen, its drafts, the longer verify pass, nothing accepted) the budget
cannot cover is not run, so a draft model costs at most 3% over plain decoding before it has
shown that it pays.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from dataclasses import dataclass
from typing import Optional

import numpy as np

from pyspec.errors import InvalidInputError
from pyspec.llama.drafting.costs import BatchCosts, default_prior
from pyspec.llama.drafting.loss_budget import CARRY_CAP, LossBudget
from pyspec.llama.rounds import Round

MAX_EXPLORE_INTERVAL = 256
WARMUP_PLAIN_ROUNDS = 3
PROBE_LENGTH = 2
MIN_ROUNDS_FOR_GAIN = 20  # speculative rounds before their gain is recorded for the next process
# The acceptance estimate behind each decision counts half a failure more than it saw: a
# handful of lucky matches alone does not license a long draft (on Gemma 270M a failed draft
# of 8 costs 4 tokens' time), while beside the counts of a long copy (a round that passes 16
# drafts adds 16) the half weighs little.
PESSIMISM = 0.5
# Until session 18, drafts longer than this came only from a bucket proven across requests
# (its first draft passed in full request after request until its learned start reached
# this length): of a chat's copies that pass 16 drafts a third fail before 32, and drafts of
# 32 from every bucket had lost the chats 1-3% in the replay. That replay verified drafts
# past the end of each recording, as the loop did past max_tokens; with both capped
# (Request.max_tokens, replay_lookup(max_tokens=...)) the rule costs the chats 1.5-2% on
# this Zen 4's curve and 0.3-1.7% on the dear one, and the edits 2-4% (docs/drafting.md), so
# it is off (DraftLengthController.unproven_draft_max None); the replay keeps it for the
# comparison.
UNPROVEN_DRAFT_MAX = 16
# SpeculativeLlama's, pyspec generate's and serve's default: pyspec.h's limit. Replayed on
# the recorded chats and edits (168 tokens each) in this Zen 4's curve measured at every size
# to 65, with the rule above: edits 1.87x plain with 32, 2.18x with 64 (llama.cpp's
# ngram-simple drafts up to 48, ngram-mod up to 64), chats unchanged; without the rule,
# edits 2.30x and chats 1.062x -> 1.079x. Replayed in docs/drafting.md.
DEFAULT_DRAFT_MAX = 64
# The unsure rule (DraftLengthController.unsure_below; the loop turns it on beside a free
# drafter, a bare controller has it off): a free draft is not
# verified while the target itself was unsure, when the smallest probability the target gave
# any of its last UNSURE_WINDOW emitted tokens (the top of each row that decided them) is
# below UNSURE_BELOW. In the recorded chats (Qwen2.5-Coder 1.5B, greedy) a copy followed for
# 8-15 tokens passed its next token 51% of the time when one of its last 4 rows gave less
# than 0.5, and 92-96% when all gave more than 0.8 (16-31 tokens: 57% against 98%). Replayed
# in three orders of the chats and edits on four batch curves, it gained the chats 0.4-2.5%
# and moved the edits -0.04% to +3.6%; no worst chat fell, one worst edit did (4.98x ->
# 4.79x plain on the Xeon AMX curve). The threshold and window were chosen on those
# recordings (0.2-0.5; 2, 4, 8 rows). It needs every round's rows' top probabilities (read
# only when a draft is to be decided, it lost 0.6-1.6% on two curves): read by a second pass
# per row they cost 0.2 ms a round on this Zen 4, about the 0.7% the rule gains on its curve,
# so it waited (session 20) for the verifier to give them from its own pass (top_probs: 0.05
# ms a round, session 21; docs/drafting.md).
# Where a calibrated shape says a pass over the last token and one draft costs less than a
# plain pass (llama.cpp's AMX kernels on one thread, costs.MIN_RATIO), nothing is held back:
# a plain round is then the dearest choice (session 49, docs/drafting.md).
UNSURE_BELOW = 0.3
UNSURE_WINDOW = 4
# The sure-copy rule (DraftLengthController.sure_above; the loop turns it on beside the unsure
# rule, a bare controller has it off): a draft whose source the output has followed for
# SURE_RUN tokens or more (Draft.followed), offered while the target gave each of its last
# UNSURE_WINDOW tokens at least SURE_ABOVE, is believed to pass each token with at least the
# floor SURE_COPY_FLOORS gives for that run (0.92 from 12 tokens, 0.95 from 24), and its
# bucket's slow start does not bound it. Why: a bucket's estimate forgets over ~13 rounds,
# so after a chat's copy broke (2 of its drafts rejected), a new copy the output then
# followed passed 30 shadow checks in a row while its bucket climbed from 0.39 to 0.87 and
# drafted nothing (session 22, recorded chat 17). In the recorded chats such a copy's next
# token passed 92-96% (8-15 tokens followed) and 93-100% (16-31) when all 4 rows gave more
# than 0.8 (docs/drafting.md). Replayed (three orders, five batch curves), against the rule
# off: chats +0.0% to +3.0% (this Zen 4's live curve +2.7% to +3.0%), edits +0.5% to +10.3%,
# no worst chat or edit lower. From 8 tokens followed instead of 12 (at 0.8 or 0.9) a worst
# chat fell on this Zen 4's calibrated curve (0.987x -> 0.960x plain), so did steps of 0.95
# from 16 and 0.97 from 32 (0.955x -> 0.936x on its live curve), and a floor learned across
# requests carried the edits' passes into the chats (a worst chat 0.955x -> 0.753x). The
# values were chosen on those recordings, which are greedy. Replayed on outputs sampled at
# 0.8 (session 23, one seed, four curves): chats -1.1% to +1.7% by the mean, but a worst
# chat lower on three curves (0.946x -> 0.893x plain on the Zen 4's), edits +0% to +14%;
# on greedy outputs recorded on another CPU (out of sample) a worst chat fell on one curve
# and a worst edit on another (0.925x -> 0.860x, 1.797x -> 1.729x).
# Kept for sampled requests too: held to greedy requests, sampled edits would lose more than
# sampled chats gain on average (docs/drafting.md).
SURE_ABOVE = 0.9
SURE_COPY_FLOORS = ((24, 0.95), (12, 0.92))  # (tokens followed, at least), longest first
SURE_RUN = SURE_COPY_FLOORS[-1][0]


# The remembered-copy rule (DraftLengthController.remembered_floor; the loop turns it on beside
# the sure-copy rule): the leading tokens of a draft that the memory of earlier requests holds
# after the same context at least twice, in an earlier answer at least once, and never
# continued otherwise (Draft.remembered, at least REMEMBERED_MIN of them; text held only in
# prompts, such as a system prompt every request sends, is not: replayed on tool calls
# that quote a few tokens of their schemas, believing it made one request 0.34x as fast on
# the Zen 3 curve, docs/drafting.md), offered while the target gave each of its last
# UNSURE_WINDOW tokens at least SURE_ABOVE, are believed to pass with at least
# REMEMBERED_FLOOR each, and the slow start does not bound them. Why: text held twice is most
# often text a model reproduced (a file in a prompt and again in its answer), and successive edits
# of one file reproduce it again; a new request's buckets restart below 0.9, where batches
# with a kink above 16 tokens (the AVX2 builds) keep each edit at drafts of 3, then 15, when
# its whole answer would pass. Measured (session 33, docs/drafting.md): on the recorded
# full-file edits, where the answers leave the remembered text at each edit, remembered tokens
# with the target sure passed 0.9966 each (greedy) and 0.9963 (sampled at 0.8); in the
# recorded chats text is remembered at 5 positions of 1,888. Replayed (three orders, eight
# curves): 96-token edits +2% to +34%, full-file edits -1% to +8% by the mean, chats within 1%
# (the same to the last digit with the answers' index of session 34).
REMEMBERED_MIN = 8
REMEMBERED_FLOOR = 0.995

# The reproduction rule (DraftLengthController.reproduced_floor; on beside the other rules
# since session 37): the tokens of a draft that continue prompt text the answer has
# reproduced from its first token (Draft.reproduced: prompt lookup's REPRODUCTION_RUN and
# REPRODUCTION_RUN_FENCED, REPRODUCTION_LEAD, cut before the instruction's next word and at
# the copied text's end),
# offered while the target gave each of its last UNSURE_WINDOW tokens at least SURE_ABOVE,
# are believed to pass with at least REPRODUCED_FLOOR each, and the slow start does not
# bound them. Why: an answer that begins by copying a file it was given to edit goes on
# copying it, but nothing is remembered for the first such request, and there the sure-copy
# floors waited for 12 tokens followed and then drafted 15 at a time (the first code edit
# on a Zen 4: 0.82x llama.cpp's ngram-map-k4v, session 35). Measured (session 36,
# docs/drafting.md): the reproduced tokens of the recorded edits, with the target sure, all
# passed in the 96-token edits and 0.993-0.994 of them in the full-file edits (the misses:
# the edits themselves). Live on the Zen 4: the first edit 48.9 -> 66.1 tok/s. Session 36
# left it opt-in: on `pyspec demo`'s rename of a short file, which edits it early and often,
# believed drafts of 63 failed at each edit (0.79x-0.96x the loop without the rule, every
# curve). With the lookup's reading of the edit request (session 37) it replays at
# 0.99x-1.19x there against session 36's default, the 96-token edits +2% to +6%, the
# full-file edits +1% to +13% (no request below 0.99x), the chats unchanged, on eleven
# curves (pyspec bench reproduction).
REPRODUCED_FLOOR = REMEMBERED_FLOOR

# The finish plan (DraftLengthController._finish_plan, session 39): where the tokens the
# remembered-copy and reproduction rules believe run to the request's end (its max_tokens,
# or the context window), the round drafts the first pass of the cheapest passes that emit
# the rest, not the length with the best rate for itself alone, which can leave a tail of a
# few tokens that costs more than it saves (a Zen 4's 96-token edit: 24 tokens, then 2; one
# pass of 26 costs 7% less). Only where the best rate leaves at most FINISH_TAIL tokens, and
# not after a believed token failed in the request: the plan takes every believed token to
# pass, so a longer first pass costs more where one does not (a sampled code question that
# left its remembered text: 0.83x on a Zen 4 curve when the plan could lengthen any pass,
# 0.97x with these bounds). The rate's choice is kept where it begins a plan at most
# FINISH_PLAN_SLACK dearer. Replayed (pyspec bench reproduction's workloads, 96 tokens,
# thirteen curves and session 39's live calibration): the 96-token edits +0% to +6% by the
# mean, no request slower; chats, tool calls, the demo and the full-file edits unchanged
# or within 1%; code questions -0.1% to +0.2% (a worst request 0.97x).
FINISH_PLAN_SLACK = 0.005
FINISH_TAIL = 8


def sure_copy_floor(followed: int) -> float:
    """The least per-token acceptance believed of a sure copy followed for ``followed``
    tokens (0.0 below SURE_RUN: no belief)."""
    return next((floor for run, floor in SURE_COPY_FLOORS if followed >= run), 0.0)


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
    # Whether its rounds must fit a loss budget against plain decoding (loss_budget.py).
    loss_budget: bool = False


# A free drafter (prompt lookup) drafts every round anyway: watched through its shadow.
FREE_DRAFTER = WatchPolicy(shadowed=True, explore_every=16, probe_after_veto=True)
# A costly drafter (a draft model) must catch up on every token of a plain stretch before it
# can draft, so a probe costs more the longer it waited: probed rarely, and every round it
# drafts must fit its loss budget (which, not a window of realised rates, stops a loser).
COSTLY_DRAFTER = WatchPolicy(
    shadowed=False, explore_every=48, probe_after_veto=False, loss_budget=True
)


class DraftLengthController:
    def __init__(
        self,
        draft_min: int = 1,
        draft_max: int = DEFAULT_DRAFT_MAX,
        *,
        ema: float = 0.15,
        prior_acceptance: float = 0.6,
        fixed: bool = False,
        watch: WatchPolicy = WatchPolicy(),
    ):
        if not 0 <= draft_min <= draft_max:
            raise InvalidInputError(
                f"need 0 <= draft_min <= draft_max, got {draft_min}, {draft_max}"
            )
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
        self.draft_cost = 0.0  # seconds per drafted token
        # Seconds a speculative round spends outside the target and the drafter beyond what a
        # plain round spends there (verifying k + 1 rows instead of sampling one, removing
        # rejected KV cells): measured for both kinds of round, the difference is charged.
        self.overhead = 0.0
        self._round_overhead: dict = {}  # speculative (bool) -> seconds (EMA)
        self.prior = prior_acceptance
        self._counts: dict = {}  # bucket -> [successes, failures]
        # Per drafted token, by its kind (Draft.token_kinds): accepted tokens are successes,
        # the first rejected one a failure, those after it unobserved (censored).
        self._kind_counts: dict = {}  # kind -> [successes, failures]
        self._kind_bucket: dict = {}  # kind -> the bucket whose draft it was in last
        self.last_expected = 0.0  # tokens the last speculative choice predicted its round emits
        self._plain_streak: dict = {}
        self._explore_interval: dict = {}
        self._probing: dict = {}  # bucket -> length of the probe now being verified
        self._probe_next: dict = {}  # bucket -> length of the follow-up probe it earned
        # Slow start after a rejection: the next draft of the bucket is at most twice the
        # tokens the last one got accepted (at least 2), and the limit doubles with every
        # round that passes in full. A copy the output has just left (sampled text wanders
        # off its source at random) is not trusted with 16 drafts at once again.
        self._limit: dict = {}  # bucket -> largest draft length for now
        # Where a bucket's slow start begins in a new request, learned across requests from
        # its first checked draft in each (a plain round's shadow check included): passed in
        # full, the next request starts twice as long; rejected, at 2 again. A drafter whose
        # copies keep passing from a request's first tokens (successive edits of one file)
        # stops paying the ramp 2, 4, 8, 16 in every request; one whose new texts leave it
        # at once keeps it. (False: every request starts at 2, the rule before.)
        self.learn_request_start = True
        self._request_start: dict = {}  # bucket -> limit a new request starts it at
        # Drafts longer than this only from a bucket whose learned start reached it (None:
        # no such rule, the default; UNPROVEN_DRAFT_MAX: the rule of sessions 16-17).
        self.unproven_draft_max: Optional[int] = None
        # A new request keeps as many of a bucket's observations as its learned start
        # (new_request). Off: replayed in bench_draftless's order (chats, then the edits) it
        # gained the edits 3-11%, but with the edits first or among the chats it cost the
        # chats 0.4-0.9% and one chat fell from 0.92x to 0.80x plain (docs/drafting.md).
        self.keep_proven_counts = False
        self._checked: set = set()  # buckets whose first draft of this request was checked
        # The limit read as the extra cost its drafts have in the default prior (False: as
        # a token count, the rule before; kept for the replayed comparison of the two).
        self.slow_start_in_cost = True
        self._realised: dict = {}  # (bucket, speculative) -> recent rounds' tokens/s
        # Below this confidence (choose's ``confidence``) a free draft is not verified (None,
        # a bare controller's default: never; UNSURE_BELOW: the rule, which the loop sets
        # beside a free drafter, docs/drafting.md). Its plain round's shadow check is not recorded
        # either: a draft held back because the target was unsure would teach its bucket the
        # acceptance of unsure moments, and hold back the drafts made when it is sure.
        self.unsure_below: Optional[float] = None
        self._held_back = False  # the last choice was plain because the target was unsure
        # At or above this confidence, a draft whose source the output has followed for
        # SURE_RUN tokens is believed to pass each token with at least sure_copy_floor
        # (None, a bare controller's default: never; SURE_ABOVE: the rule, which the loop
        # sets beside the unsure rule). _floor: that belief, during the choice it holds for.
        self.sure_above: Optional[float] = None
        self._floor = 0.0
        self._sure_copy = False  # the last choice verified a draft the sure-copy rule believed
        # The least per-token acceptance believed of a draft's remembered tokens (None, a bare
        # controller's default: never; REMEMBERED_FLOOR: the rule, which the loop sets beside
        # the sure-copy rule). _remembered: how many of the draft's tokens it holds for,
        # during the choice.
        self.remembered_floor: Optional[float] = None
        self._remembered = 0
        self._believed = 0  # leading tokens of the last choice that the rule believed
        # The same belief for the tokens of a draft that continue prompt text the answer
        # reproduces (None, a bare controller's default: never; REPRODUCED_FLOOR: the rule,
        # which the loop sets beside the remembered-copy rule).
        self.reproduced_floor: Optional[float] = None
        self._reproduced = 0
        self._believed_reproduced = 0
        # Where the tokens those two rules believe run to the request's end, the passes
        # that finish it (_finish_plan); False: the best rate for the round alone.
        self.finish_plan = True
        self._belief_missed = False  # a believed token failed in this request
        self._veto_cost: Optional[float] = None  # one-token cost when a veto began
        # A costly drafter's loss against plain decoding, bounded (loss_budget.py); its
        # catch-up cost per token, apart for one or two tokens (a round's own last token:
        # a one-token decode) and for longer stretches (a batch: cheaper per token).
        self.budget: Optional[LossBudget] = LossBudget() if watch.loss_budget else None
        self.catch_up_cost = {False: 0.0, True: 0.0}  # long stretch? -> seconds per token
        # Before the drafter has drafted: its cost per token as a fraction of the target's
        # one-token pass (from the models' sizes; None: assume as dear as the target).
        self.draft_cost_ratio: Optional[float] = None
        self.catch_up_ratio = {False: None, True: None}  # the same for the catch-up, if known
        self._carried_gain: dict = {}  # an earlier process's speculative_gain, kept until ours

    @property
    def held_back(self) -> bool:
        """Whether the last choice held a free draft back because the target was unsure
        (until the round is observed)."""
        return self._held_back

    @property
    def sure_copy(self) -> bool:
        """Whether the last choice verified a draft that the sure-copy rule believed (a
        copy followed for SURE_RUN tokens while the target was sure), until the round is
        observed."""
        return self._sure_copy

    @property
    def remembered_tokens(self) -> int:
        """How many leading tokens of the last choice the remembered-copy rule believed (0:
        the rule did not decide it), until the round is observed (``Round.remembered``)."""
        return self._believed

    @property
    def reproduced_tokens(self) -> int:
        """How many leading tokens of the last choice the reproduction rule believed (0: the
        rule did not decide it), until the round is observed (``Round.reproduced``)."""
        return self._believed_reproduced

    # ---- measurements ---------------------------------------------------------------
    def observe(self, r: Round, *, costs: bool = True) -> None:
        """Learns from one round of the loop (or of a replay): the target's cost for the
        batch, the drafter's cost, the acceptance of the draft's kind, the round's realised
        rate and overhead, and a plain round's shadow check (not when its draft was held back
        because the target was unsure: ``Round.held_back``). ``costs=False``: the
        batch cost is not recorded (a second controller sharing the curve, combined.py)."""
        if r.held_back and r.shadow_match is not None and not r.speculative:
            r = dataclasses.replace(r, shadow_match=None)
        self._held_back = self._sure_copy = False
        self._believed = self._believed_reproduced = 0
        self.record_draft(r.drafter_tokens, r.drafter_seconds)
        if costs:
            self.record_target(r.batch, r.target_seconds)
        self.record_acceptance(r.offered, r.accepted, r.bucket)
        if r.accepted < max(r.remembered, r.reproduced):
            self._belief_missed = True
        if r.token_kinds:
            if r.speculative:
                self.record_token_kinds(r.token_kinds[: r.verified], r.accepted, r.bucket)
            elif r.shadow_match is not None and self.watch.shadowed:
                self.record_token_kinds(r.token_kinds[:1], int(r.shadow_match), r.bucket)
        # The realised rate is the steady one: a long catch-up (the prompt, a plain stretch)
        # is a one-off cost, which the loss budget charges; it must not veto the drafter.
        one_off = r.catch_up_seconds if r.catch_up_tokens > 2 else 0.0
        self.record_round(r.bucket, r.speculative, r.emitted, r.round_seconds - one_off)
        self.record_overhead(r.speculative, r.round_seconds - r.target_seconds - r.draft_seconds)
        if r.shadow_match is not None and self.watch.shadowed:
            self.record_shadow(r.shadow_match, r.bucket)
        if r.catch_up_tokens:
            self.record_catch_up(r.catch_up_tokens, r.catch_up_seconds)
        if self.budget is not None:
            if r.speculative:
                self.budget.settle(r.round_seconds, r.emitted, self.plain_per_token())
            else:
                self.budget.earn(r.round_seconds)

    def record_catch_up(self, n_tokens: int, seconds: float) -> None:
        """A costly drafter evaluated n_tokens it had not seen before drafting."""
        long = n_tokens > 2
        old = self.catch_up_cost[long] or None
        self.catch_up_cost[long] = self._avg(old, seconds / n_tokens)

    def plain_per_token(self) -> Optional[float]:
        """Realised seconds per token of recent plain rounds (whole rounds: what speculation
        is held against), or the one-token pass's cost before any plain round finished."""
        plain = self._realised.get((None, False))
        if plain:
            return 1.0 / float(np.median(plain))
        return self.costs.per_token()

    def worst_case_loss(self, k: int, catch_up: int) -> float:
        """What a round of k costly drafts loses against one plain round if nothing is
        accepted: the catch-up, the drafts, the verify pass's extra rows, the overhead."""
        c1 = self.costs.per_token() or self.plain_per_token() or 0.0

        def known(measured, ratio):
            return measured or (ratio * c1 if ratio else 0.0)

        per_draft = known(self.draft_cost, self.draft_cost_ratio or 1.0)
        one = known(self.catch_up_cost[False], self.catch_up_ratio[False]) or per_draft
        # A long catch-up is one batch: per token, until measured, as much cheaper than a
        # one-token decode as the target's batches are (its curve's shape).
        batched = (
            per_draft * self.predicted_target(catch_up) / (catch_up * c1)
            if c1 and catch_up > 2
            else per_draft
        )
        long = known(self.catch_up_cost[True], self.catch_up_ratio[True]) or batched
        per_catch_up = one if catch_up <= 2 else long
        return (
            catch_up * per_catch_up
            + k * per_draft
            + self.predicted_target(k + 1)
            - self.predicted_target(1)
            + self.overhead
        )

    def _avg(self, old, new):
        return new if old is None else old + self.ema * (new - old)

    def record_target(self, n_tokens: int, seconds: float) -> None:
        """A timed forward pass of the target over n_tokens (every round has one)."""
        self.costs.observe(n_tokens, seconds)

    def use_cost_prior(self, ratios: dict, source: str = "cache", calibrated: bool = False):
        """Starts the batch curve from a known shape (n -> cost(n) / cost(1)); validate it
        with ``costs.validate_ratios`` first. Live passes override it. ``calibrated``: it
        was measured at every size (calibration.py), so its dips are believed."""
        self.costs.use_prior(ratios, source, calibrated)

    def record_draft(self, n_drafted: int, seconds: float) -> None:
        if n_drafted:
            self.draft_cost = self._avg(self.draft_cost or None, seconds / n_drafted)

    def record_overhead(self, speculative: bool, seconds: float) -> None:
        """Time a round spent outside the target's forward pass and the drafter."""
        self._round_overhead[speculative] = self._avg(
            self._round_overhead.get(speculative), seconds
        )
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
        vetoed = (
            spec is not None
            and plain is not None
            and len(spec) >= 3
            and len(plain) >= 3
            and float(np.median(spec)) < float(np.median(plain))
        )
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
        if bucket not in self._checked and bucket not in self._probing:
            self._checked.add(bucket)  # (a probe is not a draft the bucket chose)
            start = self._request_start.get(bucket, 2)
            self._request_start[bucket] = (  # as in a request: twice the draft that passed
                min(2 * max(start, n_drafted), self.draft_max) if n_accepted == n_drafted else 2
            )
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

    def _kind(self, kind, bucket):
        self._kind_bucket[kind] = bucket
        if kind not in self._kind_counts:
            a = self.acceptance(bucket)  # a new kind starts from its draft's bucket
            self._kind_counts[kind] = [a * 2, (1 - a) * 2]
        return self._kind_counts[kind]

    def record_token_kinds(self, kinds, n_accepted: int, bucket=None) -> None:
        """The fate of each verified draft token, by kind: the first n_accepted passed, the
        next (if any) was rejected, the rest were never decided."""
        decided = kinds[: n_accepted + 1]
        decay = 1 - self.ema / 2  # once per round, as for the buckets: a round of 16 passed
        for kind in set(decided):  # tokens must count 16, not be decayed 16 times
            counts = self._kind(kind, bucket)
            counts[0] *= decay
            counts[1] *= decay
        for i, kind in enumerate(decided):
            self._kind_counts[kind][0 if i < n_accepted else 1] += 1

    def kind_acceptance(self, kind, bucket=None) -> float:
        s, f = self._kind(kind, bucket)
        return s / (s + f + PESSIMISM)

    def new_request(self, weight: float = 4.0) -> None:
        """A new text: what was learned about acceptance on the last one is only a prior
        (how much of a text a drafter guesses depends on the text: a request that copies is
        often followed by one that writes something new). Each bucket's counts are scaled
        down to `weight` observations, keeping their ratio, and its drafts restart short (the
        slow-start limit where the bucket's first draft of the last requests left it: 2 after
        a rejection), so the new text's first rejections count at once; measured costs are
        kept.

        With ``keep_proven_counts`` (off by default), a bucket whose first drafts passed in
        full request after request (its learned start, ``learn_request_start``) keeps as
        many observations as that start, and so do the kinds of its drafts: with 4, the
        acceptance a new request starts from is at most 4 / (4 + PESSIMISM) = 0.89, at which
        a CPU whose batches cost nearly their tokens drafts 4 where successive edits of one
        file pass 60 (replayed in docs/drafting.md)."""
        self._belief_missed = False
        starts = self._request_start if self.learn_request_start else {}

        def kept(bucket) -> float:
            return max(weight, starts.get(bucket, 2)) if self.keep_proven_counts else weight

        scaled = [(counts, kept(b)) for b, counts in self._counts.items()]
        scaled += [(c, kept(self._kind_bucket.get(k))) for k, c in self._kind_counts.items()]
        for counts, keep in scaled:
            total = counts[0] + counts[1]
            if total > keep:
                counts[0] *= keep / total
                counts[1] *= keep / total
        self._limit = {bucket: starts.get(bucket, 2) for bucket in self._counts}
        self._checked = set()

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

    def expected_tokens(self, k: int, bucket=None, kinds=None) -> float:
        """Tokens a round drafting k is expected to emit: with ``kinds`` (one per drafted
        token) 1 + sum over j of the product of the first j tokens' acceptances; otherwise
        the geometric model of one acceptance rate."""
        if kinds or self._remembered or self._reproduced:
            total, alive, own = 1.0, 1.0, self.acceptance(bucket)
            for j in range(k):
                # (a token past the kinds given: the bucket's)
                a = self.kind_acceptance(kinds[j], bucket) if j < len(kinds or ()) else own
                floor = max(self._floor, self._believed_floor_at(j))
                alive *= min(max(a, floor), 0.999)
                total += alive
            return total
        a = min(max(self.acceptance(bucket), self._floor), 0.999)
        return (1 - a ** (k + 1)) / (1 - a)

    def _believed_floor_at(self, j: int) -> float:
        """The floor the remembered-copy and reproduction rules believe of a draft's token j
        during a choice (0.0: neither holds for it)."""
        floor = self.remembered_floor if j < self._remembered else 0.0
        if j < self._reproduced:
            floor = max(floor, self.reproduced_floor)
        return floor

    def rate(self, k: int, bucket=None, *, draft_cost: Optional[float] = None, kinds=None) -> float:
        """Predicted tokens per second when drafting k (draft_cost: seconds per draft token;
        0 for drafts already in hand; kinds: the drafted tokens' kinds, if known)."""
        per_token = self.draft_cost if draft_cost is None else draft_cost
        cost = self.predicted_target(k + 1) + k * per_token + (self.overhead if k else 0.0)
        return self.expected_tokens(k, bucket, kinds) / cost

    def verifying_is_cheaper(self) -> bool:
        """Whether a pass over the last token and one draft costs less than a plain pass over
        the last token alone: then a free draft is worth verifying however unsure the target
        was (llama.cpp's AMX kernels on one thread: costs.MIN_RATIO), and the unsure rule
        holds nothing back. Believed only from a calibrated shape (measured at every size,
        where no envelope hides a dip) once a one-token pass has been timed here: a
        monotone envelope makes a guessed dip a tie, and before any one-token pass the curve
        has no unit."""
        costs = self.costs
        if not costs.calibrated_up_to(2) or costs.per_token() is None:
            return False
        return costs.predict(2) < costs.predict(1)

    def choose_free(
        self, draft, confidence: Optional[float] = None, remaining: Optional[int] = None
    ) -> int:
        """The length to verify of a free draft in hand (a ``Draft``, which cost nothing to
        make): ``choose`` with its bucket, its tokens' kinds and the run its source has been
        followed. 0 for an empty draft, which also clears ``held_back``, ``sure_copy`` and
        ``remembered_tokens``: they speak of this round's draft. The loop and the replay
        (pyspec.testing.replay) both decide through here, so a replay decides what the loop
        would. ``remaining``: tokens the request may still emit (its max_tokens, or the
        context window's room), None where unbounded."""
        if not draft.tokens:
            self._held_back = self._sure_copy = False
            self._believed = self._believed_reproduced = 0
            return 0
        return self.choose(
            len(draft.tokens),
            draft.bucket,
            draft_cost=0.0,
            kinds=draft.token_kinds,
            confidence=confidence,
            followed=draft.followed,
            remembered=draft.remembered,
            reproduced=draft.reproduced,
            remaining=remaining,
        )

    def choose(
        self,
        limit: int,
        bucket=None,
        *,
        draft_cost: Optional[float] = None,
        catch_up: int = 0,
        kinds=None,
        confidence: Optional[float] = None,
        followed: int = 0,
        remembered: int = 0,
        reproduced: int = 0,
        remaining: Optional[int] = None,
    ) -> int:
        """The draft length for the next round: at most `limit` (context room left, or the
        drafts already proposed); ``catch_up``: tokens a costly drafter must evaluate before
        it drafts; ``kinds``: the kind of each draft in hand (Draft.token_kinds);
        ``confidence``: the smallest probability the target gave its last UNSURE_WINDOW
        emitted tokens (None: not known), below ``unsure_below`` a plain round;
        ``followed``: tokens the output has followed the draft's source (Draft.followed),
        with ``confidence`` at or above ``sure_above`` a sure copy from SURE_RUN;
        ``remembered``: leading tokens the memory of earlier requests holds (Draft.remembered),
        with ``confidence`` at or above SURE_ABOVE believed from REMEMBERED_MIN;
        ``reproduced``: leading tokens that continue prompt text the answer reproduces
        (Draft.reproduced), with ``confidence`` at or above SURE_ABOVE believed;
        ``remaining``: tokens the request may still emit (None: no end in sight), where
        believed tokens reach it, the passes that finish it (``_finish_plan``).
        ``last_reason`` says why; ``last_expected`` the tokens the choice expects."""
        self._held_back = self._sure_copy = False
        self._believed = self._believed_reproduced = 0
        if (
            confidence is not None
            and self.unsure_below is not None
            and confidence < self.unsure_below
            and self.allow_zero
            and not self.fixed
            and limit > 0
            and not (draft_cost == 0.0 and self.verifying_is_cheaper())
        ):
            self._held_back = True
            self.last_reason = (
                f"plain: the target gave one of its last tokens {confidence:.2f} "
                f"(below {self.unsure_below:.2f})"
            )
            self.last_expected = 1.0
            return 0
        sure = (
            self.sure_above is not None
            and confidence is not None
            and confidence >= self.sure_above
            and followed >= SURE_RUN
            and not self.fixed
        )
        self._floor = sure_copy_floor(followed) if sure else 0.0
        recalled = self._believable(self.remembered_floor, confidence, remembered, REMEMBERED_MIN)
        reproducing = self._believable(self.reproduced_floor, confidence, reproduced, 1)
        self._remembered = remembered if recalled else 0
        self._reproduced = reproduced if reproducing else 0
        try:
            k, self.last_reason = self._choose(limit, bucket, draft_cost)
            if k and kinds and len(set(kinds[:k])) > 1 and not self.fixed:
                # (A draft of one kind says nothing its bucket's estimate does not.)
                k, self.last_reason = self._cut_by_kinds(
                    k, bucket, draft_cost, kinds, self.last_reason
                )
            if k and self.budget is not None and draft_cost is None and not self.fixed:
                k, self.last_reason = self._within_budget(k, catch_up, self.last_reason)
            if k and remaining is not None and self.finish_plan and draft_cost == 0.0:
                k, self.last_reason = self._finish_plan(k, limit, remaining, self.last_reason)
            self.last_expected = self.expected_tokens(k, bucket, kinds) if k else 1.0
        finally:
            self._floor = 0.0
            self._remembered = self._reproduced = 0
        self._sure_copy = bool(sure and k)
        self._believed = min(remembered, k) if recalled else 0
        self._believed_reproduced = min(reproduced, k) if reproducing else 0
        if self._believed:
            self.last_reason += (
                f"; {self._believed} of its tokens earlier requests held twice or more, each "
                f"believed to pass at least {self.remembered_floor:.3f}"
            )
        if self._believed_reproduced:
            self.last_reason += (
                f"; {self._believed_reproduced} of its tokens continue the prompt text the "
                f"answer reproduces, each believed to pass at least {self.reproduced_floor:.3f}"
            )
        if self._sure_copy:
            self.last_reason += (
                f"; a copy followed for {followed} tokens while the target gave its last "
                f"tokens at least {confidence:.2f}: each believed to pass at least "
                f"{sure_copy_floor(followed):.2f}"
            )
        return k

    def _believable(self, floor, confidence, tokens: int, at_least: int) -> bool:
        """Whether a rule that believes a draft's leading ``tokens`` at ``floor`` (the
        remembered-copy and reproduction rules) holds for this choice: on (a floor set), the
        target sure (``confidence`` at or above SURE_ABOVE), enough tokens, not fixed."""
        return (
            floor is not None
            and confidence is not None
            and confidence >= SURE_ABOVE
            and tokens >= at_least
            and not self.fixed
        )

    def _finish_plan(self, k: int, limit: int, remaining: int, why: str):
        """Where the tokens this choice believes (the remembered-copy and reproduction
        rules) run to the request's end (``remaining`` tokens to emit, all of them in
        hand but the last, which the last pass emits itself), the first pass of the
        cheapest passes that emit them all, believed to pass: k itself where it begins such
        a plan. Why: the best rate for this round alone can leave a tail that costs more
        than it saves (a Zen 4's 96-token edit: 24 tokens, then 2, where one pass of 26
        costs 7% less than the two); with the end in hand, the whole rest is one plan."""
        believed = max(self._remembered, self._reproduced)
        drafts = remaining - 1  # the last token comes from the last pass
        if (
            drafts < 1
            or k > drafts
            or min(limit, believed) < drafts
            or remaining - (k + 1) > FINISH_TAIL
            or self._belief_missed
        ):
            return k, why
        widest = min(self.draft_max + 1, remaining)
        # a pass over n tokens, as rate() prices it
        cost = [0.0] + [
            self.predicted_target(n) + (self.overhead if n > 1 else 0.0)
            for n in range(1, widest + 1)
        ]
        rest = [0.0] * (remaining + 1)  # rest[m]: the cheapest passes emitting m tokens
        longest = [0] * (remaining + 1)  # the longest first pass of such passes
        for m in range(1, remaining + 1):
            rest[m], longest[m] = cost[1] + rest[m - 1], 1
            for j in range(2, min(m, widest) + 1):
                c = cost[j] + rest[m - j]
                if c <= rest[m] * (1 + 1e-9):  # (as cheap: the longer first pass)
                    rest[m], longest[m] = min(c, rest[m]), j
        if longest[remaining] < 2:  # (one token at a time: no draft pays, the rate's call)
            return k, why
        if cost[k + 1] + rest[remaining - k - 1] <= rest[remaining] * (1 + FINISH_PLAN_SLACK):
            return k, why
        passes, m = [], remaining
        while m:
            passes.append(longest[m])
            m -= longest[m]
        return passes[0] - 1, (
            f"{why}; {passes[0] - 1} to finish the request's {remaining} tokens in passes of "
            f"{'+'.join(map(str, passes))}, {rest[remaining] / cost[1]:.1f} one-token costs"
        )

    def _cut_by_kinds(self, k: int, bucket, draft_cost, kinds, why: str):
        """The draft length the per-token estimates give, at most k (the bucket's): they cut
        a draft where its tokens' kinds stop passing, never lengthen one. (Lengthening on
        them alone measured slower on code edits: with 16 drafts the batch of 17 crosses
        AMX's 16-row tile, and a cost curve measured only at the sizes it chose never
        learned that 16 tokens cost far less.)"""
        rate = lambda j: self.rate(j, bucket, draft_cost=draft_cost, kinds=kinds)  # noqa: E731
        best = max(range(max(self.draft_min, 1), k + 1), key=rate)
        if self.allow_zero and rate(0) >= rate(best):
            return 0, (
                f"plain: per token {self.kind_acceptance(kinds[0], bucket):.2f} first, "
                f"no length predicts a gain ({why})"
            )
        if best < k:
            return best, f"{why}; cut to {best} by its tokens' kinds"
        return k, why

    def drafter_record(self) -> dict:
        """What this process learned about its costly drafter, to carry to the next one
        (cost_cache.save_drafter_record): the budget's balance, and costs relative to the
        target's one-token pass (absolute times move with the machine's load)."""
        c1 = self.costs.per_token()
        if self.budget is None or not c1:
            return {}
        ratio = lambda seconds: seconds / c1 if seconds else None  # noqa: E731
        record = {
            "balance": self.budget.balance,
            "draft_cost_ratio": ratio(self.draft_cost),
            "catch_up_ratio_one": ratio(self.catch_up_cost[False]),
            "catch_up_ratio_long": ratio(self.catch_up_cost[True]),
        }
        if self.budget.rounds >= MIN_ROUNDS_FOR_GAIN:  # what its speculative rounds gained
            record.update(
                speculative_gain=self.budget.speculative_gain,
                speculative_rounds=float(self.budget.rounds),
            )
        elif self._carried_gain:
            record.update(self._carried_gain)
        return record

    def use_drafter_record(self, record: dict) -> None:
        """Starts from what an earlier process learned (``drafter_record``)."""
        if self.budget is None or not record:
            return
        self.budget.balance = min(float(record.get("balance", 0.0)), CARRY_CAP)
        self.draft_cost_ratio = record.get("draft_cost_ratio") or self.draft_cost_ratio
        self.catch_up_ratio = {
            False: record.get("catch_up_ratio_one"),
            True: record.get("catch_up_ratio_long"),
        }
        if "speculative_gain" in record:
            self._carried_gain = {
                k: record[k] for k in ("speculative_gain", "speculative_rounds") if k in record
            }

    def _within_budget(self, k: int, catch_up: int, why: str):
        """The longest draft up to k whose worst case the loss budget covers (0: none)."""
        budget = self.budget
        for length in range(k, self.draft_min - 1, -1):
            if length and budget.affords(self.worst_case_loss(length, catch_up)):
                if length < k:
                    why += f"; cut to {length} by the {budget.describe()}"
                return length, why
        worst = self.worst_case_loss(max(self.draft_min, 1), catch_up)
        return 0, (
            f"plain: {budget.describe()} does not cover the worst case of a draft "
            f"({1000 * worst:.0f} ms, {catch_up} tokens to catch up) ({why})"
        )

    def _slow_start_limit(self, bucket, hi: int) -> int:
        """The longest draft, at most hi, that the bucket's slow start allows now.

        The slow start (``_limit``, in tokens) bounds what a draft that fails costs: its
        batch's extra cost over a one-token pass. Its token counts were chosen where batches
        cost what ``default_prior`` says (2 drafts: 2.5x one token, 16: 7.1x); so the limit
        allows that same extra cost in the batch curve believed now: the token limit itself
        on a machine whose batches are as dear, longer drafts where they are cheaper (an
        AMX build: a limit of 2 drafts allows 14, whose batch costs no more than the prior's
        3). Replayed on 23 ShareGPT chats and 5 code edits (docs/drafting.md): with a cheap
        curve 1.47x -> 1.55x and 4.54x -> 5.09x plain; with a dear one unchanged. A sure copy
        is not bounded; the remembered and reproduced tokens a choice believes are allowed
        whole (the tokens past them, on the bucket's estimate, stay bounded)."""
        limit = self._limit.get(bucket)
        if limit is None or limit >= hi or self._floor:  # (a sure copy: not bounded)
            return hi
        believed = max(self._remembered, self._reproduced)
        return max(self._slow_start_tokens(limit, hi), min(hi, believed))

    def _slow_start_tokens(self, limit: int, hi: int) -> int:
        """The limit of ``limit`` tokens read in cost (``_slow_start_limit``), at most hi."""
        if not self.slow_start_in_cost:
            return limit
        one = self.predicted_target(1)
        allowed = one * (default_prior(limit + 1) - 1.0)
        # The longest within the allowance, not the end of the first run of sizes within it:
        # a calibrated curve dips (16 tokens cheaper than 15 on a Zen 4). Lengths below it
        # may cost more than the allowance; the choice avoids them (dearer, fewer tokens).
        fits = [
            k for k in range(limit + 1, hi + 1) if self.predicted_target(k + 1) - one <= allowed
        ]
        return max(fits, default=limit)

    def _choose(self, limit: int, bucket, draft_cost, kinds=None):
        hi = min(self.draft_max, limit)
        if hi < self.draft_min:
            return 0, f"room for {limit} drafts, below draft_min {self.draft_min}"
        if self.fixed:
            return hi, "fixed draft length"
        cap = self.unproven_draft_max
        if cap is not None and (
            self._request_start.get(bucket, 2) < cap or not self.learn_request_start
        ):
            hi = min(hi, max(cap, self.draft_min))
        hi = max(min(hi, self._slow_start_limit(bucket, hi)), self.draft_min)
        if self._warmup_plain > 0:
            self._warmup_plain -= 1
            return 0, "warm-up: measuring a one-token pass"
        rate = lambda k: self.rate(k, bucket, draft_cost=draft_cost, kinds=kinds)  # noqa: E731
        best = max(range(self.draft_min, hi + 1), key=rate)
        by = (
            f"per token {self.kind_acceptance(kinds[0], bucket):.2f} first"
            if kinds
            else f"acceptance {self.acceptance(bucket):.2f}"
        )
        why = f"{bucket or 'draft'}: {by}, best k={best} predicts {rate(best) / rate(0):.2f}x plain"
        if self.watch.shadowed and draft_cost == 0.0:
            if self.allow_zero and rate(0) >= rate(best):
                return 0, f"plain ({why})"
            return best, why
        # A drafter under a loss budget is held to its cumulative loss instead, which one
        # unlucky window of rounds cannot move (a median of nine short rounds can).
        vetoed = self.budget is None and self._realised_says_plain(bucket)
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
        accept = ", ".join(
            f"{b or 'draft'} {self.acceptance(b):.2f}" for b in sorted(self._counts, key=str)
        )
        parts.append(f"acceptance: {accept or 'prior ' + format(self.prior, '.2f')}")
        if self._kind_counts:
            kinds = ", ".join(
                f"{kind} {self.kind_acceptance(kind):.2f}"
                for kind in sorted(self._kind_counts, key=str)
            )
            parts.append(f"per-token acceptance by kind: {kinds}")
        if self.budget is not None:
            parts.append(self.budget.describe())
        parts.append(f"last decision: {self.last_reason}")
        return "; ".join(parts)
