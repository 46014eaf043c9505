"""One request through the speculative loop, as one object passed down its steps.

``CompletionOptions``: what ``create_completion`` asks of the ``generate`` call it makes
(rows to keep for llama-cpp-python's logprobs, logprobs pyspec answers itself, the fallback
decision). llama-cpp-python's own ``create_completion`` sits between the two calls, so the
options travel in a context variable, set only while that call (or one chunk of its stream)
runs: nothing of a request is left on the long-lived objects. ``Request``: one generate
call's state from round to round. ``Plan``: one round's drafts.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from pyspec.llama.constraints.rows import RowConstraints
from pyspec.llama.drafting.adaptive import UNSURE_WINDOW
from pyspec.llama.drafting.base import Draft
from pyspec.llama.stats import SpeculationStats
from pyspec.params import SamplingParams


@dataclass
class CompletionOptions:
    """What a create_completion call asks of its generate call."""

    emitted_rows: bool = False  # copy each emitted token's logits row into llama.scores
    prompt_rows: bool = False  # and every prompt token's (logprobs with echo)
    logprobs_top: Optional[int] = None  # pyspec answers logprobs itself: n_top per token
    # Why llama-cpp-python's loop decodes this request ('' when pyspec's does): decided once,
    # by create_completion, from its own arguments.
    fallback: str = ""
    # The most tokens create_completion takes (None: to the context's end): llama-cpp-python
    # stops reading the loop there, so drafts past it would be verified and thrown away.
    max_tokens: Optional[int] = None
    # Filled by the loop when logprobs_top is set: (token, RowLogprobs) per emitted token.
    logprobs: list = field(default_factory=list)


_CURRENT = contextvars.ContextVar("pyspec_completion_options", default=None)


@contextlib.contextmanager
def asking(options: CompletionOptions):
    """``options`` are what the generate calls made inside this block are asked."""
    token = _CURRENT.set(options)
    try:
        yield options
    finally:
        _CURRENT.reset(token)


def current_options() -> Optional[CompletionOptions]:
    """The options of the create_completion call under way (None: generate called directly)."""
    return _CURRENT.get()


@dataclass
class Request:
    """One generate call's state, shared by the steps of the loop."""

    params: SamplingParams
    constraints: Optional[RowConstraints]
    stopping_criteria: object
    stats: SpeculationStats
    prompt: list
    context: list  # the prompt, then every token emitted so far
    emitted_rows: bool  # copy each emitted token's logits row into llama.scores (logprobs)
    prompt_rows: bool  # and every prompt token's (logprobs with echo)
    logprobs_top: Optional[int]  # pyspec answers logprobs itself: n_top per emitted token
    logprobs: list  # and each emitted token's (token, RowLogprobs) goes here
    graph: object = None  # the in-graph sampler, when this request's rows are sampled there
    first_output: int = 0  # batch index of the last decode's first output row
    prompt_row: Optional[np.ndarray] = None  # the saved prompt row whose address is in use
    max_tokens: Optional[int] = None  # CompletionOptions.max_tokens
    # The probability the target gave each of its last emitted tokens (the top of the row
    # that decided it, from the verifier's pass; a grammar's rows read raw on the host; with
    # the unsure rule on): ``confidence``.
    confidence: deque = field(default_factory=lambda: deque(maxlen=UNSURE_WINDOW))
    # Tokens the last round decided that generate has not yielded yet: the next ones come
    # without a decode (``Speculation.tokens_ready``).
    ready: int = 0

    @property
    def n_prompt(self) -> int:
        return len(self.prompt)


@dataclass
class Plan:
    """A round's drafts, as the drafter, the cost model and the grammar left them. The
    prompt's round is a plan with no drafts."""

    draft: Draft
    drafts: list  # to verify; a grammar-forbidden last one is kept only for q
    probs: object  # their draft probabilities (None: point masses)
    n_offered: int  # drafts the cost model let through, before the grammar's cut
    states: Optional[list] = None  # grammar states per verify row
    forbidden: bool = False  # the last draft is forbidden (rejected for certain)
    held_back: bool = False  # the free draft waited: the target was unsure (the unsure rule)
    sure_copy: bool = False  # the draft was verified as a sure copy (the sure-copy rule)
    remembered: int = 0  # leading drafts the remembered-copy rule believed
    reproduced: int = 0  # leading drafts the reproduction rule believed

    @classmethod
    def empty(cls) -> Plan:
        return cls(Draft([]), [], None, 0)
