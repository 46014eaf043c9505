"""The most a chain of free drafts could gain on a recorded generation: the draft-length oracle.

``replay_lookup`` (replay.py) replays the cost model's choices; this module asks what the best
choices would have been, knowing the output. At each position of the recording the prompt
lookup offers the draft it would offer there; an oracle that knows how many of its tokens
the target would accept picks every round's length to spend the least target time on the
whole output (dynamic programming over positions, with the batch curve's cost per round).
Its speedup over plain decoding is the ceiling of the cost model on that recording and
curve: the replayed policy's distance from it is what better draft lengths could still win,
and the ceiling's distance from what another drafter reaches says when no choice of lengths
can close a gap (a curve whose long batches cost nearly their tokens caps every drafter).

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
from pyspec.testing.replay import batch_cost


@dataclass
class Ceiling:
    speedup: float  # plain cost / the oracle's cost for the same tokens
    batches: list  # the oracle's rounds, as batch sizes (1: a plain round)
    offered: list  # per output position, how many tokens of the lookup's draft would pass


def acceptable_runs(
    prompt: list,
    output: list,
    *,
    drafter: Optional[PromptLookup] = None,
    draft_max: int = DEFAULT_DRAFT_MAX,
    max_tokens: Optional[int] = None,
) -> list:
    """Per output position i (0 for the first, which the prompt's own pass emits), how many
    leading tokens of the draft the lookup offers there equal output[i:]: the most a round
    starting at i can accept. With ``drafter`` (one a row of requests shares, with its
    memory), the request is stored in it at the end, as replay_lookup does; ``max_tokens``:
    no draft reaches past what the request asked for, as in the loop."""
    if drafter is None:
        drafter = PromptLookup()
    drafter.start_request()
    runs = [0] * len(output)
    for i in range(1, len(output)):
        room = draft_max if max_tokens is None else min(draft_max, max(max_tokens - i - 1, 0))
        if not room:
            continue
        context = list(prompt) + list(output[:i])
        tokens = drafter.draft(context, room, None, len(context)).tokens
        run = 0
        while run < len(tokens) and i + run < len(output) and tokens[run] == output[i + run]:
            run += 1
        runs[i] = run
    drafter.end_request(list(prompt) + list(output))
    return runs


def chain_ceiling(runs: list, costs: dict) -> Ceiling:
    """The oracle's speedup over plain decoding for one recording, from ``acceptable_runs``
    and a batch curve (n -> cost of a pass over n tokens relative to one, as replay_lookup's
    ``costs``). A round at position i verifies k of the draft's tokens (0 to runs[i], and
    never past the output's end) and emits k + 1; the oracle takes the cheapest sequence."""
    n = len(runs)
    if n < 2:
        raise ValueError("a ceiling needs at least two output tokens")
    cheapest = [0.0] * (n + 1)  # [i]: least cost to emit output[i:]
    choice = [0] * (n + 1)
    for i in range(n - 1, 0, -1):
        best_cost, best_k = None, 0
        for k in range(0, min(runs[i], n - 1 - i) + 1):
            cost = batch_cost(costs, k + 1) + cheapest[i + k + 1]
            if best_cost is None or cost < best_cost:
                best_cost, best_k = cost, k
        cheapest[i], choice[i] = best_cost, best_k
    batches, i = [], 1
    while i < n:
        batches.append(choice[i] + 1)
        i += choice[i] + 1
    return Ceiling((n - 1) * batch_cost(costs, 1) / cheapest[1], batches, list(runs))
