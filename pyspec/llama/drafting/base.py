"""What every drafter is: the ``Drafter`` interface the loop calls and the ``Draft`` it returns.

Every drafter answers ``draft(context, max_tokens, params, position) -> Draft``:
``context`` is every token so far (prompt and output, the last one not yet evaluated by the
target), ``position`` the absolute position of the first drafted token. A ``Draft`` holds
the guessed ids and, when they were sampled, the distributions they were sampled from (one
sparse row per token) so the verifier can run true rejection sampling; without them the
drafts are point masses and the verifier emits exactly what plain sampling would.
The drafters themselves: ``lookup.py`` (the request's own tokens and a memory of earlier
requests), ``draft_model.py`` (a small GGUF model), ``callable.py`` (any function of the
ids), ``combined.py`` (a list of them, in order).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from pyspec.params import SamplingParams
from pyspec.request import SparseDraftProbs


@dataclass
class Draft:
    tokens: list
    probs: Optional[SparseDraftProbs] = None
    seconds: float = 0.0  # time the drafter spent
    bucket: object = None  # groups drafts of similar reliability for the acceptance estimate
    steady_seconds: Optional[float] = None  # cost when drafting every round (default: seconds)
    catch_up_tokens: int = 0  # tokens evaluated before drafting (a costly drafter's catch-up)
    catch_up_seconds: float = 0.0
    # One kind per drafted token (where it came from, how well its source agreed): the cost
    # model learns an acceptance per kind and predicts a draft's yield token by token.
    # None: every token is of the draft's bucket.
    token_kinds: Optional[list] = None
    costly: bool = False  # drafted by a costly drafter (whose controller learns from it)
    # Tokens the output has followed this draft's source so far (prompt lookup's copy
    # cursor; a re-join after an edit of a few tokens carries the run on): with the target
    # sure of them, a long-followed copy is believed to go on (DraftLengthController.
    # sure_above). 0: not a copy, or not known.
    followed: int = 0
    # Leading tokens that earlier requests (prompt lookup's memory) held after the same
    # context at least twice, in an answer at least once, and never continued otherwise
    # (RequestMemory.agreeing_run): text a model reproduced before (DraftLengthController.
    # remembered_floor). 0: none, or no memory.
    remembered: int = 0
    # Leading tokens that continue prompt text the answer has reproduced from its first
    # token or its first code fence (prompt lookup's reproduction: a file given to edit,
    # copied back), up to the edit request's next word: believed to go on
    # (DraftLengthController.reproduced_floor). 0: none, or not such an answer.
    reproduced: int = 0


# A round with no draft where verifying one draft costs less than a plain pass (llama.cpp's
# AMX kernels on one thread: costs.MIN_RATIO) verifies a filler instead: the token most
# frequent in the last FILLER_WINDOW tokens. Whatever it is, the pass costs less than the
# plain one; when it passes, the round emits two tokens. Measured (session 49, the AMX Xeon,
# Gemma 3 270M on one thread, five completion prompts twice, 96 greedy tokens, calibrated):
# 91.4 -> 106.6 tok/s by the geometric mean, the plain rounds 15-31 of a request -> 0-4.
FILLER_WINDOW = 256


def filler_draft(context) -> Draft:
    """One token to verify where nothing else is drafted (see FILLER_WINDOW)."""
    recent = np.asarray(context[-FILLER_WINDOW:], dtype=np.int64)
    token = int(np.bincount(recent).argmax()) if recent.size else 0
    return Draft([token], None, 0.0, "filler", token_kinds=["filler"])


def common_prefix(context: list, held: list) -> int:
    """How many leading tokens ``context`` shares with ``held`` (what a drafter's state, a
    KV cache or an index, holds): all of ``held`` when context extends it."""
    if context[: len(held)] == held:
        return len(held)
    common, limit = 0, min(len(context), len(held))
    while common < limit and context[common] == held[common]:
        common += 1
    return common


class Drafter:
    """Base class. A drafter whose ``free`` is True costs next to nothing, so the loop asks
    it for ``draft_max`` tokens and lets the cost model decide how many to verify."""

    name = "drafter"
    free = False

    def draft(
        self, context: np.ndarray, max_tokens: int, params: SamplingParams, position: int
    ) -> Draft:
        raise NotImplementedError

    def draft_constrained(
        self,
        context: np.ndarray,
        max_tokens: int,
        params: SamplingParams,
        position: int,
        allowed_run,
    ) -> Draft:
        """``draft`` for a request under a grammar: ``allowed_run(tokens)`` says how many
        leading tokens of a candidate the grammar allows. A drafter with several candidates
        prefers the one the grammar allows furthest; by default the one draft is offered as
        is (the loop cuts it where the grammar forbids it)."""
        return self.draft(context, max_tokens, params, position)

    def point_mass(self, params: SamplingParams) -> bool:
        """Whether this drafter's drafts for ``params`` come without probabilities (point
        masses): those are verified from the rows' own samples, which the in-graph sampler
        gives; drafts drawn from a distribution need that distribution on the host."""
        return True

    def catch_up_tokens(self, context) -> int:
        """How many tokens of ``context`` a drafter must evaluate before it can draft (the
        loss budget charges them to the round): 0 for drafters that keep no state."""
        return 0

    def start_request(self) -> None:
        """Called when a generate call starts (before its first draft). A drafter whose
        drafts depend on more than the request (a cache, what earlier requests taught it)
        must make them a function of the request from here on: a seeded request repeated
        gives the same drafts, hence the same batches and the same text."""

    def set_reproducible(self, on: bool) -> None:
        """``reproducible=True``: drafts as a fresh drafter would make them, whatever the
        earlier requests were (the default may reuse a cache when the request repeats)."""

    def end_request(self, context, n_prompt: Optional[int] = None) -> None:
        """Called when a generate call ends, with its prompt and output, the first
        ``n_prompt`` tokens the prompt (a drafter with a memory of earlier requests stores
        them, and tells the answers apart: text a model wrote)."""

    def close(self) -> None:
        pass
