"""The draft-length oracle (pyspec.testing.ceiling): its dynamic programme against brute force,
its offers against the lookup's, and its ceiling against the replayed cost model on the real
recorded generations (tests/data/recorded_generations.json)."""

import itertools
import json
import random
from pathlib import Path

import pytest

from pyspec.testing.ceiling import acceptable_runs, chain_ceiling
from pyspec.testing.replay import batch_cost, replay_lookup

DATA = json.loads((Path(__file__).parent / "data" / "recorded_generations.json").read_text())
COSTS = {m: {int(n): c for n, c in t.items()} for m, t in DATA["costs"].items()}
RECORDED_MAX_TOKENS = 300  # what tests/data/record_generations.py asked of each request


def _every_schedule(runs):
    """Every sequence of draft lengths a chain could verify on ``runs`` (brute force)."""
    n = len(runs)

    def from_(i):
        if i >= n:
            yield []
            return
        for k in range(0, min(runs[i], n - 1 - i) + 1):
            for rest in from_(i + k + 1):
                yield [k + 1] + rest

    return list(from_(1))


@pytest.mark.parametrize("seed", range(40))
def test_the_oracle_finds_the_cheapest_schedule_that_brute_force_finds(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 11)
    runs = [0] + [rng.randint(0, 6) for _ in range(n - 1)]
    # A curve with kinks (a larger batch may cost less), as measured curves have.
    costs = {1: 1.0, **{b: rng.uniform(0.8, 1.0) * b ** rng.uniform(0.3, 1.0) for b in range(2, 9)}}
    schedules = _every_schedule(runs)
    cheapest = min(sum(batch_cost(costs, b) for b in s) for s in schedules)
    ceiling = chain_ceiling(runs, costs)
    assert ceiling.speedup == pytest.approx((n - 1) / cheapest)
    assert ceiling.batches in schedules
    assert sum(batch_cost(costs, b) for b in ceiling.batches) == pytest.approx(cheapest)


def test_nothing_to_accept_is_plain_decoding():
    ceiling = chain_ceiling([0] * 9, {1: 1.0, 2: 1.1, 3: 1.2})
    assert ceiling.speedup == 1.0 and ceiling.batches == [1] * 8


def test_a_ceiling_needs_two_output_tokens():
    with pytest.raises(ValueError):
        chain_ceiling([0], {1: 1.0, 2: 1.5})


def test_the_offers_are_the_lookups_drafts_cut_to_the_request():
    """A request whose output copies its prompt: from the second position on, the lookup
    follows the copy, so each position can accept everything up to the output's end, the
    draft limit or max_tokens, whichever comes first (never past them)."""
    text = list(range(100, 160))
    prompt, output = [1, 2, 3] + text + [4], text
    free = acceptable_runs(prompt, output, draft_max=16)
    asked = acceptable_runs(prompt, output, draft_max=16, max_tokens=40)
    for i in range(2, len(output)):
        assert free[i] == min(16, len(output) - i)
        assert asked[i] == min(16, max(40 - i - 1, 0), len(output) - i)
    # Nothing in common with the prompt: nothing to accept past a guess.
    novel = acceptable_runs([7, 8, 9], list(range(500, 540)))
    assert sum(novel) <= 2


@pytest.mark.parametrize("g", DATA["generations"], ids=lambda g: g["name"])
def test_the_replayed_cost_model_never_beats_the_ceiling(g):
    """The cost model's rounds are one of the schedules the oracle weighs, so on every real
    recording its speedup is at most the ceiling; a ceiling that missed a cheaper schedule
    or counted a round wrong would fall below it somewhere."""
    costs = COSTS[g["model"]]
    draft_max = max(costs) - 1  # the curve was measured up to this batch (test_replay's)
    runs = acceptable_runs(
        g["prompt"], g["output"], draft_max=draft_max, max_tokens=RECORDED_MAX_TOKENS
    )
    ceiling = chain_ceiling(runs, costs)
    policy = replay_lookup(
        g["prompt"], g["output"], costs, draft_max=draft_max, max_tokens=RECORDED_MAX_TOKENS
    )
    assert policy.speedup <= ceiling.speedup + 1e-9
    assert ceiling.speedup >= 1.0
    assert sum(ceiling.batches) == len(g["output"]) - 1


def test_a_row_of_requests_shares_the_lookups_memory():
    """With one drafter through a row, the second request's offers come from the memory of
    the first: the same novel text, asked twice, can be accepted the second time."""
    from pyspec.llama.drafting.lookup import PromptLookup
    from pyspec.llama.drafting.request_memory import RequestMemory

    novel = [(7 * i) % 97 + 200 for i in range(60)]
    drafter = PromptLookup()
    drafter.use_memory(RequestMemory())
    first = acceptable_runs([5, 6], novel, drafter=drafter)
    second = acceptable_runs([5, 6], novel, drafter=drafter)
    assert sum(second) > 10 * max(1, sum(first))


def test_brute_force_agrees_on_every_small_case():
    """Every run pattern of length 5 with runs up to 3, on one kinked curve."""
    costs = {1: 1.0, 2: 1.9, 3: 1.7, 4: 3.5}
    for tail in itertools.product(range(4), repeat=4):
        runs = [0, *tail]
        cheapest = min(sum(batch_cost(costs, b) for b in s) for s in _every_schedule(runs))
        assert chain_ceiling(runs, costs).speedup == pytest.approx(4 / cheapest)
