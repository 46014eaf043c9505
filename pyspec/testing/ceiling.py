"""The most a chain of free drafts could gain on a recorded generation: the draft-length oracle.

``replay_lookup`` (replay.py) replays the cost model's choices; this module asks what the best
choices would have been, knowing the output. At each position of the recording the prompt
lookup offers the draft it would offer there (``lookup_offers``); an oracle that knows how
many of its tokens the target would accept picks every round's length to spend the least
target time on the whole output (``chain_ceiling``: dynamic programming over positions,
with the batch curve's cost per round; it verifies past what passes where a kink in the
curve makes the longer batch cheaper). Its speedup over plain decoding is the ceiling of any
rule for draft lengths on that recording and curve: the replayed policy's distance from it
is what better lengths could still win, and a gap to another drafter larger than that room
says lengths alone cannot close it (better drafts or cheaper batches could).

Like the replay it counts only the target's passes (no drafter, verifier or loop time) and
is the same on any machine. The drafts are what the lookup offers when the output is given
to it token by token. The loop asks only at its rounds' starts: where a copy broke inside a
round, the lookup asked one position later may follow another source for a while, so the
offers, and the ceiling, are close to the loop's rather than exactly its.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from pyspec.llama.drafting.adaptive import DEFAULT_DRAFT_MAX
from pyspec.llama.drafting.lookup import PromptLookup
from pyspec.testing.replay import batch_cost, passing, room_at


@dataclass
class Offers:
    """What the lookup offers at each output position of one recording (index 0, the token
    the prompt's own pass emits, offers nothing)."""

    lengths: list  # tokens it drafts there (at most the room the request leaves)
    runs: list  # how many of them the output follows: the most a round there accepts


@dataclass
class Ceiling:
    speedup: float  # plain cost / the oracle's cost for the same tokens
    batches: list  # the oracle's rounds, as batch sizes (1: a plain round)


def lookup_offers(
    prompt: list,
    output: list,
    *,
    drafter: Optional[PromptLookup] = None,
    draft_max: int = DEFAULT_DRAFT_MAX,
    max_tokens: Optional[int] = None,
) -> Offers:
    """The lookup's draft at every output position from the second on, and how many of its
    leading tokens equal the output there. With ``drafter`` (one a row of requests shares,
    with its memory), the request is stored in it at the end, as replay_lookup does;
    ``max_tokens``: no draft reaches past what the request asked for, as in the loop."""
    if drafter is None:
        drafter = PromptLookup()
    drafter.start_request()
    lengths, runs = [0] * len(output), [0] * len(output)
    for i in range(1, len(output)):
        room = room_at(draft_max, max_tokens, i)
        if not room:
            continue
        context = list(prompt) + list(output[:i])
        tokens = drafter.draft(context, room, None, len(context)).tokens[:room]
        lengths[i], runs[i] = len(tokens), passing(tokens, output, i)
    drafter.end_request(list(prompt) + list(output), len(prompt))
    return Offers(lengths, runs)


def emitted(offers: Offers, i: int, verified: int) -> int:
    """Tokens a round at position i emits when it verifies ``verified`` of the draft: the
    accepted ones and the target's own next token, never past the output's end."""
    return min(min(verified, offers.runs[i]) + 1, len(offers.runs) - i)


def chain_ceiling(offers: Offers, costs: dict) -> Ceiling:
    """The oracle's speedup over plain decoding for one recording, from ``lookup_offers``
    and a batch curve (n -> cost of a pass over n tokens relative to one, as replay_lookup's
    ``costs``). A round at position i may verify any length of the draft offered there (0
    to all of it) and emits what ``emitted`` says; the oracle takes the cheapest sequence.
    Verifying past what passes can pay: measured curves have kinks where a larger batch
    costs less than a smaller one."""
    n = len(offers.runs)
    if n == 0:
        raise ValueError("a ceiling needs at least one output token")
    cheapest = [0.0] * (n + 1)  # [i]: least cost to emit output[i:]
    choice = [0] * (n + 1)
    for i in range(n - 1, 0, -1):
        options = (
            (batch_cost(costs, v + 1) + cheapest[i + emitted(offers, i, v)], v)
            for v in range(offers.lengths[i] + 1)
        )
        cheapest[i], choice[i] = min(options)
    batches, i = [], 1
    while i < n:
        batches.append(choice[i] + 1)
        i += emitted(offers, i, choice[i])
    if n == 1:  # the prompt's pass emitted everything: as replay_lookup, plain's speed
        return Ceiling(1.0, batches)
    return Ceiling((n - 1) * batch_cost(costs, 1) / cheapest[1], batches)
