"""Replays the speculative loop's decisions on a recorded generation, without a model.

Given a prompt, the tokens the target emitted after it, and the target's cost per batch size
(relative to one token), ``replay_lookup`` runs the real ``PromptLookup`` drafter and the real
``DraftLengthController`` round by round, as ``Speculation.generate`` does: a draft is
accepted up to its first token that differs from the recording. Each round is a ``Round``
record, the one the loop fills, given to the controller (``observe``) and the statistics
(``SpeculationStats.add_round``) as the loop gives it. It returns the speedup the
loop would reach in cost units. Nothing is timed, so the result is the same on any machine
and under any load: it is how the tests hold the cost model to "never slower" and how
drafting strategies can be compared on real outputs before a noisy wall-clock benchmark.

What it leaves out: the drafter's and verifier's own time (well under 1% of a round here)
and timing noise; with greedy decoding the recording is exactly what speculation emits up to
batch-numerics near-ties, and with sampling the acceptance of point-mass drafts is that of
the recorded draw.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from pyspec.llama.drafting.adaptive import (
    DEFAULT_DRAFT_MAX,
    FREE_DRAFTER,
    UNSURE_WINDOW,
    DraftLengthController,
)
from pyspec.llama.drafting.base import Draft
from pyspec.llama.drafting.lookup import PromptLookup
from pyspec.llama.rounds import Round
from pyspec.llama.stats import SpeculationStats


@dataclass
class ReplayResult:
    speedup: float  # plain cost / speculative cost for the same tokens
    plain_steps: int
    verify_steps: int
    drafted: int
    accepted: int
    controller: DraftLengthController = None  # as it stands after the replay
    unsure_holds: int = 0  # rounds whose draft waited: the target was unsure (the unsure rule)
    sure_copy_rounds: int = 0  # rounds whose draft was verified as a sure copy (the rule)
    remembered_rounds: int = 0  # rounds the remembered-copy rule believed
    reproduced_rounds: int = 0  # rounds the reproduction rule believed
    # With a second branch (``replay_lookup``'s ``branch``): the rounds whose chain was
    # rejected at the branch's node, those of them that had a branch, those where its first
    # token was the target's, and the branch tokens verified in all.
    branch_rejections: int = 0
    branch_offers: int = 0
    branch_rescues: int = 0
    branch_tokens: int = 0


def batch_cost(costs: dict, n: int) -> float:
    """Cost of a forward pass over n tokens from measured sizes (piecewise linear; beyond the
    largest size, the last segment's slope)."""
    xs = sorted(costs)
    ys = [costs[x] for x in xs]
    if n <= xs[-1]:
        return float(np.interp(n, xs, ys))
    slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) if len(xs) > 1 else 1.0
    return ys[-1] + slope * (n - xs[-1])


def room_at(draft_max: int, max_tokens: Optional[int], i: int) -> int:
    """How many tokens a round at output position i may draft: draft_max, and never past a
    request's ``max_tokens`` (None: no such limit), as the loop cuts it."""
    return draft_max if max_tokens is None else min(draft_max, max(max_tokens - i - 1, 0))


def passing(tokens, output, i: int) -> int:
    """How many leading ``tokens`` equal ``output[i:]``: what a point-mass draft verified at
    position i accepts (greedy, or the recorded draws)."""
    run = 0
    while run < len(tokens) and i + run < len(output) and tokens[run] == output[i + run]:
        run += 1
    return run


def replay_lookup(
    prompt: list,
    output: list,
    costs: dict,
    *,
    draft_max: int = DEFAULT_DRAFT_MAX,
    shadowed: bool = True,
    controller: DraftLengthController = None,
    timing: Optional[Callable[[int, int], float]] = None,
    cost_prior: Optional[dict] = None,
    drafter: Optional[PromptLookup] = None,
    max_tokens: Optional[int] = None,
    confidence: Optional[Sequence[float]] = None,
    branch: Optional[Callable[[list, list, int], tuple]] = None,
) -> ReplayResult:
    """Speedup of prompt-lookup speculation on a recorded generation.

    ``costs`` maps batch sizes to forward-pass costs relative to one token (at least sizes 1
    and draft_max + 1 should be there). The controller starts from nothing, as the loop
    does, and learns the costs from the rounds' timings. ``timing(round, n)``, when given,
    is the factor by which round ``round``'s pass over n tokens is *observed* slower than it
    costs (noise, a busy machine, a load that comes and goes): the controller sees the
    observed time, the speedup counts the true cost, so it measures how good the decisions
    stay under such timings. ``shadowed``: plain rounds check the draft they did not verify
    against the token they emit, as the loop does for free drafters. ``controller``: one that
    a replay of an earlier request returned (``ReplayResult.controller``), to replay requests
    in a row as one ``Llama`` serves them: what was learned on one is the starting point of
    the next; it brings its own draft_max and shadowing. ``cost_prior``: a batch-cost shape
    (n -> cost(n) / cost(1)) to start from, as the loop does from its cost cache.
    ``drafter``: a PromptLookup to reuse across the requests of a row, as the loop does (with
    ``use_memory``, the memory of earlier requests is searched and each replayed request is
    stored in it at its end); a fresh one otherwise. ``max_tokens``: the request asked for at
    most this many tokens (create_completion's), so no round drafts past it, as in the loop
    (None: a generation read to its end, the drafts as long as the controller allows).
    ``confidence``: per output token, the probability the target gave it (the top of the row
    that decided it, for greedy outputs), so the controller sees the smallest of the last
    UNSURE_WINDOW as the loop shows it with the unsure rule on (None: not known, as on the
    in-graph path). ``branch``: a tree's second branch beside the chain, as an exact tree
    verifier would check it in the same batch: ``branch(context, drafts, accepted)`` returns
    ``(node, tokens)``, tokens that leave the chain at its ``node``-th draft (0: at the root)
    as alternatives to it. They cost their rows in the round's batch; where the chain is
    rejected at that node and the branch's first token is the recording's, the round emits
    along the branch. The controller observes each round as its chain alone (its choices
    stay the chain's), so the speedup differs from the chains' only by what the branch costs
    and rescues. ``accepted`` is given so that a bound no real tree reaches (the branch
    placed where the chain fails) can be replayed too."""
    if not output:
        raise ValueError("replay needs at least one output token")
    if drafter is None:
        drafter = PromptLookup()
    drafter.start_request()
    if controller is None:
        watch = dataclasses.replace(FREE_DRAFTER, shadowed=shadowed)
        controller = DraftLengthController(0, draft_max, watch=watch)
        if cost_prior:
            controller.use_cost_prior(cost_prior)
    else:
        controller.new_request()
        draft_max = controller.draft_max
    stats = SpeculationStats()
    tallies = dict(branch_rejections=0, branch_offers=0, branch_rescues=0, branch_tokens=0)
    i, spent = 1, 0.0  # the first output token comes from the prompt's own logits
    while i < len(output):
        context = list(prompt) + list(output[:i])
        room = room_at(draft_max, max_tokens, i)
        draft = drafter.draft(context, room, None, len(context)) if room else Draft([])
        recent = [] if confidence is None else confidence[max(0, i - UNSURE_WINDOW) : i]
        sure = float(min(recent)) if len(recent) else None
        remaining = None if max_tokens is None else max(max_tokens - i, 0)
        k = controller.choose_free(draft, sure, remaining=remaining)
        accepted = passing(draft.tokens[:k], output, i)
        emitted = chain_emitted = min(accepted + 1, len(output) - i)
        extra: list = []
        if branch is not None and k:
            node, extra = branch(context, list(draft.tokens[:k]), accepted)
            extra = list(extra)[: max(room - node, 0)]  # no row past the request's limit
            rescued = _tally_branch(tallies, extra, output, i, node, accepted, k)
            if rescued:
                emitted = min(node + rescued + 1, len(output) - i)
        cost = batch_cost(costs, k + 1)
        spent += batch_cost(costs, k + 1 + len(extra))
        observed = cost * (timing(stats.steps, k + 1) if timing else 1.0)
        r = Round(
            bucket=draft.bucket,
            offered=k,
            verified=k,
            accepted=accepted,
            emitted=chain_emitted,  # the controller learns the chain (a branch aside)
            batch=k + 1,
            target_seconds=observed,
            round_seconds=observed,
            token_kinds=tuple(draft.token_kinds or ()),
            shadow_match=(draft.tokens[0] == output[i]) if not k and draft.tokens else None,
            held_back=controller.held_back,
            sure_copy=controller.sure_copy,
            remembered=controller.remembered_tokens,
            reproduced=controller.reproduced_tokens,
        )
        controller.observe(r)
        stats.add_round(r)
        i += emitted
    drafter.end_request(list(prompt) + list(output), len(prompt))
    speedup = (len(output) - 1) * batch_cost(costs, 1) / spent if spent else 1.0
    return ReplayResult(
        speedup,
        stats.plain_steps,
        stats.verify_steps,
        stats.drafted,
        stats.accepted,
        controller,
        stats.unsure_holds,
        stats.sure_copy_rounds,
        stats.remembered_rounds,
        stats.reproduced_rounds,
        **tallies,
    )


def _tally_branch(tallies: dict, extra: list, output, i: int, node: int, accepted: int, k: int):
    """Counts one round's branch into ``tallies``; returns how many of its tokens the
    recording follows where the chain was rejected at the branch's node (0: no rescue)."""
    tallies["branch_tokens"] += len(extra)
    if not (accepted == node < k):
        return 0
    tallies["branch_rejections"] += 1
    tallies["branch_offers"] += bool(extra)
    run = passing(extra, output, i + node)
    tallies["branch_rescues"] += run > 0
    return run
