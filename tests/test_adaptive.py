"""The draft-length cost model, on synthetic costs (no model needed)."""

import numpy as np
import pytest

from pyspec.llama.drafting.adaptive import (
    FINISH_TAIL,
    REMEMBERED_FLOOR,
    REMEMBERED_MIN,
    REPRODUCED_FLOOR,
    SURE_ABOVE,
    SURE_COPY_FLOORS,
    SURE_RUN,
    UNPROVEN_DRAFT_MAX,
    UNSURE_BELOW,
    WARMUP_PLAIN_ROUNDS,
    DraftLengthController,
    WatchPolicy,
    sure_copy_floor,
)
from pyspec.llama.drafting.base import Draft
from pyspec.llama.drafting.costs import default_prior
from pyspec.llama.rounds import Round


def seed_costs(c, costs: dict) -> None:
    """Gives a controller an exactly known batch curve: the shape as its prior (what the
    cost cache does) and the one-token cost as measured (what plain rounds do)."""
    one = costs[1]
    c.use_cost_prior({n: t / one for n, t in costs.items() if n > 1})
    for _ in range(3):
        c.record_target(1, one)


def _controller(batch_cost, acceptance, draft_cost=0.0, **kw):
    c = DraftLengthController(0, 8, **kw)
    seed_costs(c, {n: batch_cost(n) for n in (1, 2, 3, 5, 9)})
    for _ in range(30):
        c.record_acceptance(4, 4 if acceptance > 0.5 else 0)
    c.draft_cost = draft_cost
    return c


def test_warm_up_rounds_are_plain():
    c = _controller(lambda n: 1.0 + 0.1 * (n - 1), acceptance=1.0)
    assert [c.choose(8) for _ in range(WARMUP_PLAIN_ROUNDS)] == [0] * WARMUP_PLAIN_ROUNDS
    assert c.choose(8) == 8  # cheap batches and perfect drafts: draft the most


def test_expensive_batches_or_bad_drafts_decode_plainly_with_rare_probes():
    c = _controller(lambda n: float(n), acceptance=0.0)  # a batch of n costs n tokens
    choices = [c.choose(8) for _ in range(1000)]
    probes = sum(1 for k in choices if k)
    assert 0 < probes <= 6  # intervals double: 16, 32, ..., 256


def test_room_limits_the_draft_length():
    c = _controller(lambda n: 1.0 + 0.1 * (n - 1), acceptance=1.0)
    for _ in range(WARMUP_PLAIN_ROUNDS):
        c.choose(8)
    assert c.choose(3) == 3 and c.choose(0) == 0


def test_realised_throughput_overrules_the_prediction():
    c = _controller(
        lambda n: 1.0 + 0.1 * (n - 1), acceptance=1.0, watch=WatchPolicy(probe_after_veto=False)
    )
    for _ in range(5):
        c.record_round(None, False, 1, 1.0)  # plain: 1 token/s
        c.record_round(None, True, 2, 4.0)  # speculative: 0.5 token/s
    assert all(c.choose(8) == 0 for _ in range(600))  # vetoed, and never probed again


def test_a_veto_is_lifted_when_the_machine_load_changes():
    # One busy stretch must not switch a costly drafter off for good: when the one-token cost
    # moves by more than 1.5x, the speculative rounds' record is dropped and it is tried again.
    c = _controller(
        lambda n: 1.0 + 0.1 * (n - 1), acceptance=1.0, watch=WatchPolicy(probe_after_veto=False)
    )
    for _ in range(5):
        c.record_round(None, False, 1, 1.0)
        c.record_round(None, True, 2, 4.0)
    assert all(c.choose(8) == 0 for _ in range(50))
    assert "realised" in c.last_reason
    for _ in range(15):
        c.record_target(1, 3.0)  # the load changed: one token now costs 3x
    assert c.choose(8) > 0


def test_costs_between_measured_sizes_follow_the_measurements():
    # Batching gets cheaper per token as batches grow (a concave cost): a straight line
    # through all sizes would misprice both short and long drafts.
    c = DraftLengthController(0, 24)
    seed_costs(c, {1: 1.0, 2: 2.0, 9: 4.8, 17: 6.2})
    assert abs(c.predicted_target(2) - 2.0) < 1e-12
    assert abs(c.predicted_target(13) - 5.5) < 1e-12  # halfway between 9 and 17
    assert 6.2 < c.predicted_target(25) < 6.2 * 25 / 17  # beyond 17: concave growth
    c.record_target(9, 1.0)  # a noisy measurement below a smaller size's cost ...
    assert c.predicted_target(9) >= c.predicted_target(2)  # ... never makes more tokens cheaper


def test_a_probe_that_passes_in_full_is_followed_by_a_longer_one():
    c = _controller(lambda n: float(n), acceptance=0.0)  # plain is the decision
    choices = []
    while not any(choices):
        choices.append(c.choose(16, "copy", draft_cost=0.0))
    first = choices[-1]
    c.record_acceptance(first, first, "copy")  # the probe passed in full
    assert c.choose(16, "copy", draft_cost=0.0) == 2 * first  # at once, twice as long
    c.record_acceptance(2 * first, 0, "copy")  # this one failed
    assert c.choose(16, "copy", draft_cost=0.0) == 0  # back to waiting


def test_after_a_rejection_drafts_restart_short_and_grow_back():
    # Batches exactly as dear as the default prior: the slow start's token limits hold as such.
    c = _controller(default_prior, acceptance=1.0)  # long drafts still pay
    c.draft_max = 16
    for _ in range(WARMUP_PLAIN_ROUNDS):
        c.choose(16, draft_cost=0.0)
    assert c.choose(16, draft_cost=0.0) == 16
    c.record_acceptance(16, 1)  # the output left the copy after one token
    assert c.choose(16, draft_cost=0.0) == 2
    c.record_acceptance(2, 2)
    assert c.choose(16, draft_cost=0.0) == 4
    c.record_acceptance(4, 4)
    assert c.choose(16, draft_cost=0.0) == 8


def test_where_batches_are_cheap_the_slow_start_allows_the_priors_cost_not_its_tokens():
    """The slow start bounds what a failed draft costs: after a rejection, the longest draft
    whose extra cost over one token is at most what 2 drafts cost in the default prior."""
    per_token = 0.2
    c = _controller(lambda n: 1.0 + per_token * (n - 1), acceptance=1.0)
    c.draft_max = 16
    for _ in range(WARMUP_PLAIN_ROUNDS):
        c.choose(16, draft_cost=0.0)
    assert c.choose(16, draft_cost=0.0) == 16
    c.record_acceptance(16, 1)
    allowed = default_prior(3) - 1.0  # 1.54 one-token passes
    expected = max(k for k in range(2, 17) if per_token * k <= allowed + 1e-9)
    assert expected == 7  # 7 drafts cost 1.4 passes more than one token; 8 would cost 1.6
    assert c.choose(16, draft_cost=0.0) == expected
    c.record_acceptance(expected, expected)  # passed in full: the limit doubles, to 14
    assert c.choose(16, draft_cost=0.0) == 16  # 14 drafts' prior cost covers 16 here


def _shadowed(batch_cost):
    c = DraftLengthController(0, 16, watch=WatchPolicy(shadowed=True))
    seed_costs(c, {n: batch_cost(n) for n in (1, 2, 3, 5, 9, 17)})
    for _ in range(WARMUP_PLAIN_ROUNDS):
        c.choose(16, "copy", draft_cost=0.0)
    return c


def test_a_watched_free_drafter_is_never_probed_while_it_misses():
    c = _shadowed(lambda n: 1.0 + 0.3 * (n - 1))
    for _ in range(10):  # the prior is soon outweighed
        c.record_shadow(False, "copy")
    choices = []
    for _ in range(1000):
        choices.append(c.choose(16, "copy", draft_cost=0.0))
        c.record_shadow(False, "copy")  # the plain round emitted something else
    assert not any(choices)  # no probe pays for what the plain rounds already showed


GEMMA_COSTS = {1: 1.0, 2: 2.0, 3: 2.5, 5: 4.1, 9: 4.8, 17: 6.0}  # measured shape, 2 cores


def test_plain_rounds_that_emit_the_draft_switch_speculation_on():
    c = _shadowed(lambda n: float(np.interp(n, list(GEMMA_COSTS), list(GEMMA_COSTS.values()))))
    for _ in range(40):
        c.choose(16, "copy", draft_cost=0.0)
        c.record_shadow(False, "copy")
    waited = 0
    while c.choose(16, "copy", draft_cost=0.0) == 0:
        c.record_shadow(True, "copy")  # the output now follows the draft token by token
        waited += 1
        assert waited < 40, "matching plain rounds never led to a draft"
    assert waited >= 3  # one lucky match is not enough after 40 misses
    lengths = []
    for _ in range(30):  # drafts that keep passing in full grow to the longest
        k = c.choose(16, "copy", draft_cost=0.0)
        lengths.append(k)
        c.record_acceptance(k, k, "copy")
    assert lengths[-1] == 16 and lengths == sorted(lengths), lengths


def test_a_new_request_starts_from_the_last_one_as_a_weak_prior():
    c = _shadowed(default_prior)  # long drafts pay, and a failed one costs what the prior says
    c.record_acceptance(16, 3, "copy")  # the request's first copy soon left its source
    for _ in range(50):
        c.record_acceptance(16, 16, "copy")
    assert c.choose(16, "copy", draft_cost=0.0) == 16
    before = c.acceptance("copy")
    c.new_request()
    after = c.acceptance("copy")
    assert 0.8 < after < before  # a few observations' worth of the old rate
    assert c.choose(16, "copy", draft_cost=0.0) == 2  # and drafts restart short
    c.record_acceptance(2, 0, "copy")  # one failure on the new text now counts
    assert c.acceptance("copy") < after - 0.1


def test_a_bucket_whose_first_drafts_keep_passing_starts_each_new_request_longer():
    """Successive edits of one file: the copy passes from each request's first draft on, so
    the slow start a new request begins with doubles, request after request, up to the
    longest draft; a request whose first draft is rejected sets it back to 2. (Cheap
    batches, so the choice is the slow start's limit, read in tokens here.)"""
    c = _shadowed(lambda n: 1.0 + 0.01 * (n - 1))
    c.slow_start_in_cost = False
    c.record_shadow(True, "copy")  # the request's first check of a copy: it passed
    for _ in range(20):
        c.record_acceptance(16, 16, "copy")
    starts = []
    for _ in range(3):
        c.new_request()
        k = c.choose(16, "copy", draft_cost=0.0)
        starts.append(k)
        c.record_acceptance(k, k, "copy")  # the first draft passes in full
        for _ in range(5):
            c.record_acceptance(16, 16, "copy")
    assert starts == [4, 8, 16]
    c.new_request()
    c.record_acceptance(16, 1, "copy")  # this text left the copy at once ...
    for _ in range(5):
        c.record_acceptance(16, 16, "copy")
    c.new_request()
    assert c.choose(16, "copy", draft_cost=0.0) == 2  # ... so the next one starts short again
    c.learn_request_start = False  # the rule before: every request starts at 2
    for _ in range(5):
        c.record_acceptance(16, 16, "copy")
    c.new_request()
    assert c.choose(16, "copy", draft_cost=0.0) == 2


def test_decisions_use_a_pessimistic_acceptance_estimate():
    few, many = DraftLengthController(0, 16, prior_acceptance=1.0), DraftLengthController(0, 16)
    for _ in range(3):
        few.record_shadow(True, "b")  # three matches, no failure seen yet
    assert few.acceptance("b") < 0.9  # the plain ratio would say 1.0
    for _ in range(40):
        many.record_acceptance(16, 16, "b")  # a long copy
    assert many.acceptance("b") > 0.99


def test_a_speculative_round_is_charged_the_overhead_a_plain_round_does_not_pay():
    c = DraftLengthController(0, 8)
    seed_costs(c, {1: 1.0, 2: 1.1, 9: 1.8})
    c.record_overhead(True, 0.30)  # verifying 9 rows, removing rejected cells
    assert c.overhead == 0.0  # nothing to compare with yet
    c.record_overhead(False, 0.05)  # sampling one row
    assert abs(c.overhead - 0.25) < 1e-12
    assert abs(c.rate(8, draft_cost=0.0) * (1.8 + 0.25) - c.expected_tokens(8)) < 1e-9
    for _ in range(30):
        c.record_overhead(False, 1.0)  # plain rounds costlier than speculative ones: no credit
    assert c.overhead == 0.0


def test_per_token_kinds_cut_a_draft_where_its_source_stops_agreeing():
    # Tokens the occurrences agreed on always pass, split ones never: a draft of three agreed
    # tokens then five split ones is cut after the third, though the draft's bucket as a
    # whole passes most of its tokens (the one-rate model verifies nearly all eight).
    from pyspec.llama.drafting.adaptive import FREE_DRAFTER

    c = DraftLengthController(0, 8, watch=FREE_DRAFTER)
    seed_costs(c, {n: 1.0 + 0.15 * (n - 1) for n in (1, 2, 3, 5, 9)})
    for _ in range(WARMUP_PLAIN_ROUNDS):
        c.choose(8)
    kinds = ["agreed"] * 3 + ["split"] * 5
    for _ in range(40):
        c.record_acceptance(8, 7, "copy")
        c.record_token_kinds(["agreed"] * 6 + ["split"], 6, "copy")  # the split one failed
        c.record_token_kinds(["split"], 0, "copy")
    assert c.kind_acceptance("agreed", "copy") > 0.95 > 0.05 > c.kind_acceptance("split", "copy")
    assert c.choose(8, "copy", draft_cost=0.0) >= 6  # one rate: draft (nearly) all
    assert c.choose(8, "copy", draft_cost=0.0, kinds=kinds) == 3  # per token: cut
    assert abs(c.last_expected - c.expected_tokens(3, "copy", kinds)) < 1e-12
    assert 3.5 < c.last_expected < 4.0
    # A plain round's shadow check teaches the first token's kind.
    from pyspec.llama.rounds import Round

    before = c.kind_acceptance("fresh", "copy")
    c.observe(Round(bucket="copy", target_seconds=1.0, shadow_match=True, token_kinds=("fresh",)))
    assert c.kind_acceptance("fresh", "copy") > before


def test_drafts_beyond_16_only_from_a_bucket_proven_across_requests():
    """With the rule of sessions 16-17 (``unproven_draft_max``): a copy that passes from the
    first draft of request after request (edits of one file) earns drafts up to draft_max
    (32); until then, and for a bucket whose first draft of a request failed, drafts stop at
    UNPROVEN_DRAFT_MAX (16), however cheap the batch."""
    c = DraftLengthController(0, 32, watch=WatchPolicy(shadowed=True))
    c.unproven_draft_max = UNPROVEN_DRAFT_MAX
    seed_costs(c, {n: 1.0 + 0.01 * (n - 1) for n in (1, 2, 3, 5, 9, 17, 33)})
    c.slow_start_in_cost = False  # the limits as token counts: what this test states
    for _ in range(WARMUP_PLAIN_ROUNDS):
        c.choose(32, "copy", draft_cost=0.0)
    c.record_shadow(True, "copy")  # the first request's first check of the copy passed
    for _ in range(30):
        c.record_acceptance(16, 16, "copy")  # and the copy went on
    c.new_request()
    firsts, longest = [], []
    for _ in range(5):
        k = c.choose(32, "copy", draft_cost=0.0)
        firsts.append(k)
        c.record_acceptance(k, k, "copy")
        lengths = []
        for _ in range(6):  # the rest of the request: the copy keeps passing
            lengths.append(c.choose(32, "copy", draft_cost=0.0))
            c.record_acceptance(lengths[-1], lengths[-1], "copy")
        longest.append(max(lengths))
        c.new_request()
    assert firsts[:3] == [4, 8, 16], firsts  # each request starts twice as long as the last
    assert longest[0] == 16, longest  # capped at 16 until a first draft earns a start of 16
    assert min(longest[1:]) > 16, longest  # then longer (as long as the acceptance says)
    c.record_acceptance(32, 3, "copy")  # a request whose first draft fails ...
    c.new_request()
    for _ in range(8):
        k = c.choose(32, "copy", draft_cost=0.0)
        c.record_acceptance(k, k, "copy")
    assert c.choose(32, "copy", draft_cost=0.0) == 16  # ... leaves the copy unproven again


def test_a_copy_that_keeps_passing_drafts_past_16_in_its_first_request():
    """By default no bucket needs to be proven across requests: in a fresh controller's first
    request a copy's drafts double with every round that passes in full, past 16 to
    draft_max, and fall back to twice what passed when one fails."""
    c = DraftLengthController(0, 64, watch=WatchPolicy(shadowed=True))
    assert c.unproven_draft_max is None
    seed_costs(c, {n: 1.0 + 0.01 * (n - 1) for n in (1, 2, 3, 5, 9, 17, 33, 65)})
    c.slow_start_in_cost = False  # the limits as token counts
    for _ in range(WARMUP_PLAIN_ROUNDS):
        c.choose(64, "copy", draft_cost=0.0)
    for _ in range(30):
        c.record_acceptance(4, 4, "copy")
    c._limit["copy"] = 2  # a slow start from 2 drafts, as after a rejection
    lengths = []
    for _ in range(6):
        lengths.append(c.choose(64, "copy", draft_cost=0.0))
        c.record_acceptance(lengths[-1], lengths[-1], "copy")
    assert lengths == [2, 4, 8, 16, 32, 64], lengths
    c.record_acceptance(64, 5, "copy")
    assert c.choose(64, "copy", draft_cost=0.0) == 10


def test_a_bucket_proven_across_requests_keeps_its_acceptance_at_a_new_request():
    """With keep_proven_counts (off by default), a new request keeps 4 observations of a
    bucket (at most 4 / 4.5 = 0.89 acceptance), except a bucket whose first drafts passed
    request after request: it keeps as many as its learned start, and so do its drafts'
    kinds. A bucket that just failed keeps 4."""
    c = DraftLengthController(0, 64, watch=WatchPolicy(shadowed=True))
    assert c.keep_proven_counts is False
    c.keep_proven_counts = True
    for _ in range(6):  # requests whose first copy passed in full, and whose copy went on
        c.record_token_kinds(["copy"] * 40, 40, "copy")
        c.record_acceptance(40, 40, "copy")
        c.record_acceptance(3, 1, "guess")
        c.new_request()
    assert c._request_start["copy"] == 64 and c._request_start["guess"] == 2
    assert c.acceptance("copy") > 0.99 and c.kind_acceptance("copy", "copy") > 0.99
    assert c.acceptance("guess") < 0.89
    c.keep_proven_counts = False  # the default: 4 observations for every bucket
    c.record_acceptance(40, 40, "copy")
    c.new_request()
    assert 0.88 < c.acceptance("copy") < 0.89


# A Zen 4 EPYC's curve for Qwen2.5-Coder 1.5B Q4_K_M on 2 threads (one token = 1): the
# repacked Q4_K kernels take a batch's rows four at a time, so 16 tokens cost less than 15.
ZEN4_CURVE = {
    **{1: 1.0, 2: 1.54, 3: 2.22, 4: 2.76, 5: 3.47, 6: 3.99, 7: 4.21, 8: 6.27, 9: 7.14},
    **{10: 7.3, 11: 7.5, 12: 7.72, 13: 8.3, 14: 8.8, 15: 10.5, 16: 7.25, 17: 9.2},
}


def test_a_calibrated_curve_drafts_the_length_whose_batch_is_cheap():
    """Measured at every size, the curve's dip at 16 tokens is believed: a copy that keeps
    passing drafts 15 (one batch of 16), not 16 (a batch of 17, 27% dearer). The same curve
    as an uncalibrated prior is held to its envelope (16 tokens as dear as 15): drafts of 6
    (a batch of 7 at 4.2x one token) then look best."""
    chosen = {}
    for calibrated in (True, False):
        c = DraftLengthController(0, 16, watch=WatchPolicy(shadowed=True))
        c.use_cost_prior({n: v for n, v in ZEN4_CURVE.items() if n > 1}, calibrated=calibrated)
        for _ in range(3):
            c.record_target(1, 0.04)
        for _ in range(30):
            c.record_acceptance(16, 16, "copy")
        for _ in range(WARMUP_PLAIN_ROUNDS):
            c.choose(16, "copy", draft_cost=0.0)
        chosen[calibrated] = c.choose(16, "copy", draft_cost=0.0)
    assert chosen == {True: 15, False: 6}


def _sure_copy():
    """A watched copy bucket whose drafts pass: with batches this cheap it drafts long."""
    c = _shadowed(lambda n: 1.0 + 0.1 * (n - 1))
    assert c.unsure_below is None  # the rule is off by default
    c.unsure_below = UNSURE_BELOW
    for _ in range(20):
        c.record_acceptance(8, 8, "copy")
    assert c.choose(16, "copy", draft_cost=0.0) > 0
    return c


def test_a_free_draft_is_held_back_while_the_target_is_unsure():
    c = _sure_copy()
    sure = c.choose(16, "copy", draft_cost=0.0, confidence=UNSURE_BELOW + 0.01)
    assert sure == c.choose(16, "copy", draft_cost=0.0, confidence=None) > 0
    assert c.choose(16, "copy", draft_cost=0.0, confidence=UNSURE_BELOW - 0.01) == 0
    assert "target" in c.last_reason and c.last_expected == 1.0
    c.unsure_below = None  # the rule off: the same confidence drafts as before
    assert c.choose(16, "copy", draft_cost=0.0, confidence=0.01) == sure
    fixed = DraftLengthController(0, 4, fixed=True)  # fixed lengths promise their length
    fixed.unsure_below = UNSURE_BELOW
    assert fixed.allow_zero and fixed.choose(16, confidence=0.01) == 4


def test_nothing_is_held_back_where_verifying_a_draft_costs_less_than_a_plain_pass():
    # llama.cpp's AMX kernels on one thread: a batch of 2 cost 0.72-0.77x one token (session
    # 49), so a plain round is the dearest choice however unsure the target was.
    shape = {n: {2: 0.77}.get(n, 0.8 + 0.1 * (n - 2)) for n in range(2, 18)}
    cheap = DraftLengthController(0, 16, watch=WatchPolicy(shadowed=True))
    cheap.use_cost_prior(shape, calibrated=True)  # (calibrate()'s: every size measured)
    assert not cheap.verifying_is_cheaper()  # no one-token pass timed yet: no unit
    for _ in range(WARMUP_PLAIN_ROUNDS):
        cheap.record_target(1, 1.0)
        cheap.choose(16, "copy", draft_cost=0.0)
    cheap.unsure_below = UNSURE_BELOW
    for _ in range(20):
        cheap.record_acceptance(1, 0, "guess")  # guesses that never pass
    assert cheap.choose(16, "guess", draft_cost=0.0, confidence=0.01) >= 1
    assert not cheap.held_back
    # The same with a batch of 2 at 1.05x one token: held back (a costly drafter's draft,
    # which costs its own passes, never is exempt either).
    dear = _shadowed(lambda n: 1.05 if n == 2 else 1.0 + 0.1 * (n - 1))
    dear.unsure_below = UNSURE_BELOW
    assert dear.choose(16, "guess", draft_cost=0.0, confidence=0.01) == 0 and dear.held_back
    assert cheap.choose(16, "guess", draft_cost=0.01, confidence=0.01) == 0 and cheap.held_back
    # The same cheap shape not calibrated (a cached live shape): its envelope makes the dip
    # a tie, which says nothing; held back.
    guessed = DraftLengthController(0, 16, watch=WatchPolicy(shadowed=True))
    guessed.use_cost_prior(shape, calibrated=False)
    for _ in range(WARMUP_PLAIN_ROUNDS):
        guessed.record_target(1, 1.0)
        guessed.choose(16, "copy", draft_cost=0.0)
    guessed.unsure_below = UNSURE_BELOW
    assert guessed.choose(16, "guess", draft_cost=0.0, confidence=0.01) == 0
    assert guessed.held_back


def _missed(held_back: bool = False) -> Round:
    """A plain round (one token, at the one-token cost) whose draft's first token missed
    (``held_back``: the round was plain because the unsure rule held its draft back)."""
    return Round(
        bucket="copy",
        target_seconds=1.0,
        round_seconds=1.0,
        shadow_match=False,
        held_back=held_back,
    )


def test_a_draft_held_back_while_unsure_teaches_its_bucket_nothing():
    """Its plain round's shadow check is dropped: the bucket keeps the acceptance of the
    drafts it verifies, and is not taught that of unsure moments."""
    held, watched = _sure_copy(), _sure_copy()
    for _ in range(30):
        assert held.choose(16, "copy", draft_cost=0.0, confidence=0.1) == 0
        assert held.held_back
        held.observe(_missed(held_back=held.held_back))
        watched.choose(16, "copy", draft_cost=0.0)
        assert not watched.held_back
        watched.observe(_missed(held_back=watched.held_back))
    assert held.acceptance("copy") > 0.9 > 0.5 > watched.acceptance("copy")
    # a plain round chosen for any other reason still records its check
    held.choose(0, "copy", draft_cost=0.0, confidence=0.1)  # no room: not held back
    assert not held.held_back
    before = held.acceptance("copy")
    held.observe(_missed(held_back=held.held_back))
    assert held.acceptance("copy") < before


def _broken_copy():
    """A watched copy bucket that has just failed: acceptance about 0.45 and a slow start
    at 2, on a curve like this Zen 4's (a batch of 9 costs 6.6 tokens, one of 17 only 7)."""
    c = _shadowed(lambda n: 1.0 + 0.7 * (n - 1) if n <= 9 else 6.6 + 0.05 * (n - 9))
    for _ in range(6):
        c.record_acceptance(4, 1, "copy")
    assert 0.3 < c.acceptance("copy") < 0.6
    return c


def test_a_sure_copy_long_followed_is_drafted_where_its_bucket_alone_would_wait():
    c = _broken_copy()
    assert c.sure_above is None  # off on a bare controller
    sure = dict(draft_cost=0.0, confidence=SURE_ABOVE, followed=SURE_RUN)
    assert c.choose(16, "copy", **sure) == 0  # the rule off: the bucket decides
    c.sure_above = SURE_ABOVE
    assert c.choose(16, "copy", **sure) == 16  # past the bucket's slow start
    assert "copy followed for" in c.last_reason and c.sure_copy  # said, and counted
    assert c.last_expected > 1 + 8 * sure_copy_floor(SURE_RUN) ** 8  # what the belief predicts
    # not sure enough, followed too briefly, or the confidence unknown: the bucket decides
    for off in (
        dict(sure, confidence=SURE_ABOVE - 0.01),
        dict(sure, followed=SURE_RUN - 1),
        dict(sure, confidence=None),
    ):
        assert c.choose(16, "copy", **off) == 0
        assert "copy followed for" not in c.last_reason and not c.sure_copy
    # the belief holds for its choice only: outside it, the bucket's estimate decides
    assert c.expected_tokens(8, "copy") < 1 + 8 * sure_copy_floor(SURE_RUN) ** 8
    # the flag lasts until its round is observed
    assert c.choose(16, "copy", **sure) == 16 and c.sure_copy
    c.observe(_missed())
    assert not c.sure_copy


def test_a_free_draft_in_hand_is_chosen_from_its_own_fields_and_an_empty_one_clears_the_flags():
    """choose_free (the loop's and the replay's one way to decide a free draft) reads the
    draft's bucket, kinds and run; an empty draft drafts nothing and leaves no flag of an
    earlier choice standing (the loop reads them without looking at the draft)."""
    copy = Draft(list(range(16)), bucket="copy", followed=SURE_RUN)
    by_hand, free = _broken_copy(), _broken_copy()
    for c in (by_hand, free):
        c.sure_above = SURE_ABOVE
    fields = dict(kinds=None, confidence=SURE_ABOVE, followed=SURE_RUN)
    k = by_hand.choose(16, "copy", draft_cost=0.0, **fields)
    assert free.choose_free(copy, SURE_ABOVE) == k == 16 and free.sure_copy
    assert free.choose_free(Draft(list(range(16)), bucket="copy"), SURE_ABOVE) == 0  # not a copy
    assert free.choose_free(copy, SURE_ABOVE) == 16 and free.sure_copy
    assert free.choose_free(Draft([]), SURE_ABOVE) == 0 and not free.sure_copy
    free.unsure_below = UNSURE_BELOW
    assert free.choose_free(copy, UNSURE_BELOW - 0.01) == 0 and free.held_back
    assert free.choose_free(Draft([]), UNSURE_BELOW - 0.01) == 0 and not free.held_back


def test_a_longer_sure_copy_is_believed_more():
    """The floor steps up with the run (SURE_COPY_FLOORS): from 12 tokens followed 0.92,
    from 24 0.95; below the shortest run, none."""
    assert sure_copy_floor(SURE_RUN - 1) == 0.0
    floors = [sure_copy_floor(run) for run, _ in reversed(SURE_COPY_FLOORS)]
    assert floors == sorted(floors) and len(set(floors)) == len(floors) > 1
    assert sure_copy_floor(10_000) == SURE_COPY_FLOORS[0][1]
    c = _broken_copy()
    c.sure_above = SURE_ABOVE
    expected = {}
    for run, floor in SURE_COPY_FLOORS:
        assert c.choose(16, "copy", draft_cost=0.0, confidence=0.99, followed=run) == 16
        assert f"at least {floor:.2f}" in c.last_reason
        expected[run] = c.last_expected
    longest, shortest = SURE_COPY_FLOORS[0][0], SURE_COPY_FLOORS[-1][0]
    assert expected[longest] > expected[shortest]


def test_a_sure_copy_is_only_a_floor_and_a_fixed_length_ignores_it():
    c = _shadowed(lambda n: 1.0 + 0.7 * (n - 1))
    c.sure_above = SURE_ABOVE
    for _ in range(20):
        c.record_acceptance(16, 16, "copy")  # a bucket surer than the floor
    sure = dict(draft_cost=0.0, confidence=0.99, followed=40)
    believed = c.choose(16, "copy", **sure)
    assert believed == c.choose(16, "copy", draft_cost=0.0) > 8  # never below the bucket
    fixed = DraftLengthController(0, 4, fixed=True)
    fixed.sure_above = SURE_ABOVE
    assert fixed.choose(16, **sure) == 4
    assert not fixed.sure_copy and "copy followed for" not in fixed.last_reason


def _kinked_copy():
    """A copy bucket that passes about 0.97 of its tokens, on a curve with a kink above 16
    tokens (the AVX2 build on the Xeon: 16 tokens 5.1x one, 17 6.6x, 64 16.9x): at that belief
    15 drafts are best; only a belief near certainty pays the longest batch."""
    c = DraftLengthController(0, 63, watch=WatchPolicy(shadowed=True))
    curve = {1: 1.0, 2: 1.6, 3: 2.0, 5: 2.7, 9: 4.6, 16: 5.06, 17: 6.6, 32: 9.5, 48: 13.4, 64: 16.9}
    seed_costs(c, curve)
    c.use_cost_prior({n: t for n, t in curve.items() if n > 1}, calibrated=True)
    for _ in range(WARMUP_PLAIN_ROUNDS):
        c.choose(63, "copy", draft_cost=0.0)
    for _ in range(20):  # one draft in three fails late
        for accepted in (15, 15, 10):
            c.record_acceptance(15, accepted, "copy")
    assert 0.95 < c.acceptance("copy") < 0.98
    return c


def test_remembered_tokens_are_believed_only_with_the_rule_on_a_sure_target_and_enough_of_them():
    c = _kinked_copy()
    assert c.remembered_floor is None  # off on a bare controller
    copy = Draft(list(range(63)), bucket="copy", remembered=63)
    own = c.choose_free(copy, 0.99)
    assert own == 15 and c.remembered_tokens == 0  # the rule off: the bucket's choice
    c.remembered_floor = REMEMBERED_FLOOR
    assert c.choose_free(copy, 0.99) == 63  # believed: the longest batch pays
    assert c.remembered_tokens == 63 and "earlier requests held" in c.last_reason
    assert c.last_expected > 1 + 63 * REMEMBERED_FLOOR**63  # what the belief predicts
    for confidence, remembered in ((SURE_ABOVE - 0.01, 63), (None, 63), (0.99, REMEMBERED_MIN - 1)):
        other = Draft(list(range(63)), bucket="copy", remembered=remembered)
        assert c.choose_free(other, confidence) == own
        assert c.remembered_tokens == 0 and "earlier requests held" not in c.last_reason
    # the flag lasts until its round is observed, and an empty draft clears it
    assert c.choose_free(copy, 0.99) == 63 and c.remembered_tokens == 63
    c.observe(Round(bucket="copy", offered=63, verified=63, accepted=63, emitted=64, batch=64))
    assert c.remembered_tokens == 0
    assert c.choose_free(copy, 0.99) == 63
    assert c.choose_free(Draft([]), 0.99) == 0 and c.remembered_tokens == 0
    fixed = DraftLengthController(0, 4, fixed=True)
    fixed.remembered_floor = REMEMBERED_FLOOR
    assert fixed.choose_free(copy, 0.99) == 4 and fixed.remembered_tokens == 0


def test_reproduced_tokens_are_believed_only_with_the_rule_on_and_a_sure_target():
    """The reproduction rule believes a draft's reproduced tokens (Draft.reproduced) at
    reproduced_floor as the remembered-copy rule believes remembered ones: the longest batch
    pays; a part reproduced is believed alone; off, unsure or fixed: the bucket's choice."""
    c = _kinked_copy()
    assert c.reproduced_floor is None  # off on a bare controller
    copy = Draft(list(range(63)), bucket="copy", reproduced=63)
    own = c.choose_free(copy, 0.99)
    assert own == 15 and c.reproduced_tokens == 0
    c.reproduced_floor = REPRODUCED_FLOOR
    assert c.choose_free(copy, 0.99) == 63
    assert c.reproduced_tokens == 63 and c.remembered_tokens == 0
    assert "answer reproduces" in c.last_reason
    for confidence in (SURE_ABOVE - 0.01, None):
        assert c.choose_free(copy, confidence) == own and c.reproduced_tokens == 0
    part = Draft(list(range(63)), bucket="copy", reproduced=31)
    assert c.choose_free(part, 0.99) == 31 and c.reproduced_tokens == 31
    c.observe(Round(bucket="copy", offered=31, verified=31, accepted=31, emitted=32, batch=32))
    assert c.reproduced_tokens == 0  # until its round is observed
    assert c.choose_free(Draft([]), 0.99) == 0 and c.reproduced_tokens == 0
    fixed = DraftLengthController(0, 4, fixed=True)
    fixed.reproduced_floor = REPRODUCED_FLOOR
    assert fixed.choose_free(copy, 0.99) == 4 and fixed.reproduced_tokens == 0


def _zen4_reproduction():
    """The reproduction rule on, over the Zen 4 EPYC's calibrated curve of session 39 (its
    measured sizes near 24 and 32: a batch of 24 is the cheapest per token around it, one of
    32 up to 44; 2 tokens cost 1.79x one), with a copy bucket that passes about 0.85 of its
    tokens."""
    c = DraftLengthController(0, 64, watch=WatchPolicy(shadowed=True))
    curve = {1: 1.0, 2: 1.79, 3: 2.6, 4: 3.33, 5: 3.93, 8: 7.45, 16: 7.88, 22: 10.27}
    curve.update({23: 10.63, 24: 10.8, 25: 11.28, 26: 11.71, 27: 12.87, 32: 12.71, 33: 14.5})
    curve.update({44: 19.0, 65: 22.13})
    seed_costs(c, curve)
    c.use_cost_prior({n: t for n, t in curve.items() if n > 1}, calibrated=True)
    for _ in range(WARMUP_PLAIN_ROUNDS):
        c.choose(64, "copy", draft_cost=0.0)
    for _ in range(20):
        for accepted in (15, 10, 13):
            c.record_acceptance(15, accepted, "copy")
    c.reproduced_floor = REPRODUCED_FLOOR
    return c


def test_believed_tokens_that_reach_the_requests_end_finish_it_in_the_cheapest_passes():
    """Where the believed tokens run to the request's end (``remaining``), the choice is the
    first pass of the cheapest passes that emit them all: 25 drafts (one pass of 26, 11.71
    one-token costs) where the round's best rate alone drafts 23 (24, then a pass of 2: 12.59).
    Not without an end, with the plan off, with believed tokens short of the end, a tail
    longer than FINISH_TAIL, or after a believed token failed in the request."""
    c = _zen4_reproduction()
    to_end = Draft(list(range(25)), bucket="copy", reproduced=25)
    assert c.choose_free(to_end, 0.99) == 23  # no end in sight: the best rate
    assert c.choose_free(to_end, 0.99, remaining=40) == 23  # the end is past the draft
    assert c.choose_free(to_end, 0.99, remaining=26) == 25
    assert "finish the request's 26 tokens in passes of 26" in c.last_reason
    assert c.reproduced_tokens == 25
    short = Draft(list(range(25)), bucket="copy", reproduced=24)
    assert c.choose_free(short, 0.99, remaining=26) == 23  # one token not believed
    unsure = c.choose_free(to_end, 0.5)
    assert c.choose_free(to_end, 0.5, remaining=26) == unsure != 25  # nothing believed
    recalled = Draft(list(range(25)), bucket="copy", remembered=25)
    c.remembered_floor = REMEMBERED_FLOOR
    assert c.choose_free(recalled, 0.99, remaining=26) == 25  # remembered tokens alike
    c.remembered_floor = None
    assert c.choose_free(recalled, 0.99, remaining=26) == unsure  # (not believed: off)
    c.finish_plan = False
    assert c.choose_free(to_end, 0.99, remaining=26) == 23
    c.finish_plan = True
    # A long tail is left to the rounds that reach it (the plan assumes every believed
    # token passes; a first miss costs the longer pass).
    long_way = Draft(list(range(43)), bucket="copy", reproduced=43)
    k = c.choose_free(long_way, 0.99)
    assert k == 31 and 44 - (k + 1) > FINISH_TAIL  # the best rate leaves 12 to do
    assert c.choose_free(long_way, 0.99, remaining=44) == k
    # A believed round that passed in full changes nothing; one whose believed token failed
    # brings back the best rate, until the next request.
    c.choose_free(to_end, 0.99)
    c.observe(
        Round(
            bucket="copy", offered=23, verified=23, accepted=23, emitted=24, batch=24, reproduced=23
        )
    )
    assert c.choose_free(to_end, 0.99, remaining=26) == 25
    c.choose_free(Draft(list(range(30)), bucket="copy", reproduced=30), 0.99)
    c.observe(
        Round(
            bucket="copy", offered=30, verified=30, accepted=3, emitted=4, batch=31, reproduced=30
        )
    )
    assert c.choose_free(to_end, 0.99, remaining=26) == 23
    c.new_request()
    assert c.choose_free(to_end, 0.99, remaining=26) == 25


def test_only_the_remembered_tokens_are_believed():
    """Past the remembered stretch the bucket's estimate and its slow start hold: of a draft
    of 63 whose first 31 tokens are remembered, those 31 are verified (a batch of 32; the
    bucket alone drafts 15, all 63 believed would be 63), and outside a choice the bucket's
    estimate is as it was."""
    c = _kinked_copy()
    c.remembered_floor = REMEMBERED_FLOOR
    part = Draft(list(range(63)), bucket="copy", remembered=31)
    assert c.choose_free(part, 0.99) == 31 and c.remembered_tokens == 31
    a = c.acceptance("copy")
    assert c.expected_tokens(63, "copy") == pytest.approx((1 - a**64) / (1 - a))
