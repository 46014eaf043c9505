"""The draft-length oracle (pyspec.testing.ceiling): its dynamic programme against brute force,
its offers against the lookup's, and its ceiling against the replayed cost model on the real
recorded generations (tests/data/recorded_generations.json)."""

import itertools
import random

import pytest
from test_replay import COSTS, DATA, RECORDED_MAX_TOKENS

from pyspec.testing.ceiling import Offers, chain_ceiling, emitted, lookup_offers
from pyspec.testing.replay import batch_cost, replay_lookup


def _every_schedule(offers: Offers):
    """Every sequence of batch sizes a chain could verify on ``offers`` (brute force: at
    each round any length of the draft in hand, up to all of it)."""
    n = len(offers.runs)

    def from_(i):
        if i >= n:
            yield []
            return
        for v in range(offers.lengths[i] + 1):
            for rest in from_(i + emitted(offers, i, v)):
                yield [v + 1] + rest

    return list(from_(1))


def _cheapest(offers, costs) -> float:
    return min(sum(batch_cost(costs, b) for b in s) for s in _every_schedule(offers))


def _random_offers(rng, n):
    lengths = [0] + [rng.randint(0, 5) for _ in range(n - 1)]
    runs = [rng.randint(0, length) for length in lengths]
    return Offers(lengths, runs)


@pytest.mark.parametrize("seed", range(40))
def test_the_oracle_finds_the_cheapest_schedule_that_brute_force_finds(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 9)
    offers = _random_offers(rng, n)
    # A curve with kinks (a larger batch may cost less), as measured curves have.
    costs = {1: 1.0, **{b: rng.uniform(0.8, 1.0) * b ** rng.uniform(0.3, 1.0) for b in range(2, 7)}}
    cheapest = _cheapest(offers, costs)
    ceiling = chain_ceiling(offers, costs)
    assert ceiling.speedup == pytest.approx((n - 1) / cheapest)
    assert ceiling.batches in _every_schedule(offers)
    assert sum(batch_cost(costs, b) for b in ceiling.batches) == pytest.approx(cheapest)


def test_verifying_past_what_passes_pays_where_the_curve_has_a_kink():
    """A draft of 3 of which 2 pass, on a curve where 4 tokens cost less than 3: the oracle
    verifies all 3 (batch 4, 1.5) rather than only the 2 that pass (batch 3, 3.0)."""
    offers = Offers(lengths=[0, 3, 0, 0], runs=[0, 2, 0, 0])
    ceiling = chain_ceiling(offers, {1: 1.0, 2: 2.0, 3: 3.0, 4: 1.5})
    assert ceiling.batches == [4]
    assert ceiling.speedup == pytest.approx(3 / 1.5)


def test_every_small_case_agrees_with_brute_force():
    """Every pattern of runs up to 3 in drafts of 3 over five tokens, on one kinked curve."""
    costs = {1: 1.0, 2: 1.9, 3: 1.7, 4: 3.5}
    for tail in itertools.product(range(4), repeat=4):
        offers = Offers([0, 3, 3, 3, 3], [0, *tail])
        assert chain_ceiling(offers, costs).speedup == pytest.approx(4 / _cheapest(offers, costs))


def test_nothing_to_accept_is_plain_decoding():
    ceiling = chain_ceiling(Offers([0] * 9, [0] * 9), {1: 1.0, 2: 1.1, 3: 1.2})
    assert ceiling.speedup == 1.0 and ceiling.batches == [1] * 8
    # A draft that never passes is not worth verifying on a rising curve.
    ceiling = chain_ceiling(Offers([0] + [4] * 8, [0] * 9), {1: 1.0, 5: 3.0})
    assert ceiling.speedup == 1.0 and ceiling.batches == [1] * 8


def test_an_output_of_one_token_is_plain_speed_and_none_is_refused():
    assert chain_ceiling(Offers([0], [0]), {1: 1.0, 2: 1.5}).speedup == 1.0
    with pytest.raises(ValueError):
        chain_ceiling(Offers([], []), {1: 1.0, 2: 1.5})


def test_the_offers_are_the_lookups_drafts_cut_to_the_request():
    """A request whose output copies its prompt: the lookup follows the copy from the first
    drafted position, so each position can accept everything up to the output's end, the
    draft limit or max_tokens, whichever comes first (never past them)."""
    text = list(range(100, 160))
    prompt, output = [1, 2, 3] + text + [4], text
    free = lookup_offers(prompt, output, draft_max=16)
    asked = lookup_offers(prompt, output, draft_max=16, max_tokens=40)
    assert free.runs[0] == free.lengths[0] == 0  # the prompt's own pass emits output[0]
    for i in range(1, len(output)):
        assert free.runs[i] == min(16, len(output) - i)
        room = min(16, max(40 - i - 1, 0))
        assert asked.runs[i] == min(room, len(output) - i)
        assert asked.lengths[i] <= room
    # Nothing in common with the prompt, no token twice: nothing offered passes.
    novel = lookup_offers([7, 8, 9], list(range(500, 540)))
    assert sum(novel.runs) == 0


def test_a_row_of_requests_shares_the_lookups_memory():
    """With one drafter through a row, the second request's offers come from the memory of
    the first: the same novel text, asked twice, passes the second time."""
    from pyspec.llama.drafting.lookup import PromptLookup
    from pyspec.llama.drafting.request_memory import RequestMemory

    novel = [(7 * i) % 97 + 200 for i in range(60)]
    drafter = PromptLookup()
    drafter.use_memory(RequestMemory())
    first = lookup_offers([5, 6], novel, drafter=drafter)
    second = lookup_offers([5, 6], novel, drafter=drafter)
    assert sum(first.runs) == 0
    assert sum(second.runs) > 10 * len(novel)


@pytest.mark.parametrize("g", DATA["generations"], ids=lambda g: g["name"])
def test_the_replayed_cost_model_stays_under_the_ceiling(g):
    """The cost model's rounds are among the schedules the oracle weighs (as far as the
    lookup asked at every position offers what the loop's lookup offered at its rounds'
    starts), so on the real recordings its speedup is at most the ceiling; an oracle that
    missed a cheaper schedule or counted a round wrong would fall below it somewhere."""
    costs = COSTS[g["model"]]
    draft_max = max(costs) - 1  # the curve was measured up to this batch (test_replay's)
    offers = lookup_offers(
        g["prompt"], g["output"], draft_max=draft_max, max_tokens=RECORDED_MAX_TOKENS
    )
    ceiling = chain_ceiling(offers, costs)
    policy = replay_lookup(
        g["prompt"], g["output"], costs, draft_max=draft_max, max_tokens=RECORDED_MAX_TOKENS
    )
    assert policy.speedup <= ceiling.speedup + 1e-9
    assert ceiling.speedup >= 1.0
    assert sum(emitted_by(offers, ceiling.batches)) == len(g["output"]) - 1


def emitted_by(offers: Offers, batches: list) -> list:
    """Tokens each of the oracle's rounds emits, walked from the second position."""
    out, i = [], 1
    for b in batches:
        out.append(emitted(offers, i, b - 1))
        i += out[-1]
    return out
