"""What a verify call takes and gives back: the request and result records shared by the
host path (``pyspec.verifier``) and the device path (``pyspec.cuda``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

import numpy as np

from pyspec.params import SamplingParams


@dataclass
class SparseDraftProbs:
    """Draft distributions given as (token, probability) pairs, one row per draft.

    ``tokens`` and ``probs`` are ``[n_draft, m]`` (int32 / float32); a token a row does not
    list has probability 0; pad rows with probability 0.
    """

    tokens: Any
    probs: Any


DraftProbs = Union[None, np.ndarray, SparseDraftProbs]


@dataclass
class VerifyResult:
    """Outcome of verifying one sequence.

    ``tokens`` holds the ``n_accepted`` accepted drafts followed by exactly one corrective or
    bonus token; ``logprobs`` (when requested) the log-probability of each under the raw
    target distribution (log-softmax of the untransformed logits); ``top_probs`` (when
    requested) the largest probability of that distribution at each emitted row, how sure the
    target was where it decided each token (on the CPU it leaves out the logits more than 16
    below the row's maximum: at most n_vocab * exp(-16) of itself too high, never lower than
    float rounding allows).
    """

    n_accepted: int
    tokens: np.ndarray
    logprobs: Optional[np.ndarray] = None
    top_probs: Optional[np.ndarray] = None


@dataclass
class VerifyRequest:
    """One sequence of a ``verify_batch`` call (see ``verify`` for the fields)."""

    target_logits: Any
    draft_tokens: Sequence[int]
    draft_probs: DraftProbs = None
    params: SamplingParams = field(default_factory=SamplingParams)
    position: int = 0
    penalty_history: Optional[Sequence[int]] = None


@dataclass(frozen=True)
class RowLogprobs:
    """What a completion's ``logprobs`` report for one emitted token (``row_logprobs``), under
    the raw softmax of its row: ``logprob`` of the token asked about (None when none was),
    and the ``n_top`` most likely tokens as ``top_ids`` (int32) and ``top_logprobs``
    (float32), most likely first."""

    logprob: Optional[float]
    top_ids: np.ndarray
    top_logprobs: np.ndarray


@dataclass(frozen=True)
class LogitsPointer:
    """One row of logits given by address (for example ``llama_get_logits_ith``): read in
    place, never copied. The caller keeps the buffer alive during the call."""

    address: int
    n_vocab: int
    dtype: str = "float32"
