"""Verify rows under a grammar and logits processors, sampled as llama-cpp-python samples.

llama-cpp-python draws each token with one chain (``Llama._init_sampler``): the logits
processors on the whole row (given every token so far), the penalties, the grammar (every
token it forbids to -inf), then top-k, top-p, min-p, temperature and the draw. The fused
verifier does the penalties and everything after the grammar; this module does what comes
before it, for every verify row, and hands the verifier rows that already hold -inf where the
grammar says no. The verifier then samples each row from exactly the chain's distribution,
and every verification mode (point-mass drafts, draft probabilities, greedy) stays exact.

Masking a whole row costs a grammar check per vocabulary entry (what llama-cpp-python pays
per token). It is rarely needed: top-k keeps only the k best *allowed* tokens, and what
follows top-k (top-p, min-p, temperature) looks only at those, so any row that keeps them
and forbids the rest gives the same distribution and the same draw. ``kept_tokens`` finds
them by checking tokens in falling order of logit, a few hundred at a time, until k allowed
ones are found (1 for greedy); only top-k off (or a raw-softmax draw) checks every token.

Rows are built for the state after each draft prefix (the grammar copied per row, so a
rejected draft's state is simply dropped); a draft the grammar forbids can never be
accepted, so the loop verifies no draft past it.
"""

from __future__ import annotations

import time
from typing import Optional, Sequence

import numpy as np

from pyspec.errors import InvalidInputError, InvalidRequestError, LogitsError
from pyspec.llama.constraints.grammar import GrammarState
from pyspec.params import SamplingParams

# Tokens checked per step of the walk down the row: first those tied at the maximum, then
# about these many more each time (cumulative), then the rest of the vocabulary.
_WALK_COUNTS = (256, 4096, 32768)
_SUBSAMPLE = 64  # thresholds come from every 64th logit: one cheap partial sort


def kept_tokens(
    state: GrammarState,
    row: np.ndarray,
    m: int,
    always: Optional[np.ndarray] = None,
    *,
    top_p: float = 1.0,
    min_p: float = 0.0,
    top: Optional[float] = None,
) -> np.ndarray:
    """Allowed token ids that include the ``m`` highest-logit allowed tokens of ``row``,
    ties at the m-th included, plus every allowed token of ``always``.

    ``always`` holds the tokens whose logits the penalties will change (the penalty window):
    their final order is unknown here, so they are checked whatever their raw logit. Every
    other token keeps its logit, so the walk over raw logits finds the rest. Returned ids are
    a superset of what top-m over the allowed tokens keeps, and all allowed: forbidding
    everything else changes neither the distribution nor the draw.

    ``top_p`` / ``min_p`` (without penalties only): the walk also stops once every token
    below it is sure to be cut by them, which matters when fewer than m tokens are allowed
    at all (the end of a JSON value, where only a few tokens fit): min-p drops a token more
    than ln(min_p) below the best allowed one, and top-p is reached by the tokens found once
    their mass beats top_p times the most the top-m set could hold.

    ``top``: ``row.max()`` when the caller has it already (a pass over the row saved).
    """
    n = row.size
    if m >= n:  # top-k off: every token can matter (the window among them)
        ids = np.arange(n)
        return ids[state.allowed(ids)]
    always = np.zeros(0, dtype=np.int64) if always is None else np.unique(np.asarray(always))
    kept = [always[state.allowed(always)]] if always.size else []
    top = row.max() if top is None else top
    sub = np.sort(row[::_SUBSAMPLE])[::-1] if n > _SUBSAMPLE * 8 else np.sort(row)[::-1]
    step = _SUBSAMPLE if n > _SUBSAMPLE * 8 else 1
    thresholds = [top]
    for count in _WALK_COUNTS:
        j = max(count, 8 * m) // step
        if j < sub.size:
            thresholds.append(sub[j])
    thresholds.append(-np.inf)
    found = 0
    found_values = []
    upper = None
    for threshold in thresholds:
        # Each step checks the tokens in [threshold, upper): every later one is strictly
        # lower than every token checked so far, ties included.
        chunk = row >= threshold if upper is None else (row >= threshold) & (row < upper)
        ids = np.flatnonzero(chunk)
        if always.size:
            ids = ids[~np.isin(ids, always)]
        allowed = ids[state.allowed(ids)]
        kept.append(allowed)
        found += allowed.size
        found_values.append(row[allowed])
        upper = threshold
        if found >= m:
            break
        if (
            found
            and not always.size
            and _rest_is_cut(np.concatenate(found_values), threshold, m - found, top_p, min_p)
        ):
            break
    return np.concatenate(kept) if kept else np.zeros(0, dtype=np.int64)


_MARGIN = 1e-3  # logits: llama.cpp compares in float32; stop only with room to spare


def _rest_is_cut(values: np.ndarray, below: float, room: int, top_p: float, min_p: float) -> bool:
    """Whether min-p or top-p cut every token under ``below`` (none of which is checked yet)
    given the allowed ``values`` found above it; ``room``: how many more top-k can take."""
    if below == -np.inf:
        return False
    best = float(values.max())
    if not np.isfinite(best):
        return False
    if min_p > 0.0 and below <= best + np.log(min_p) - _MARGIN:
        return True
    if top_p < 1.0:
        mass = float(np.exp(values.astype(np.float64) - best).sum())
        most = mass + room * np.exp(float(below) - best + _MARGIN)
        return mass >= top_p * most * (1 + 1e-4)
    return False


def _check_row(row: np.ndarray, what: str) -> float:
    """The row's maximum, after checking it holds no NaN or +inf."""
    top = row.max()
    if np.isnan(top) or top == np.inf:
        raise LogitsError(f"{what} holds NaN or +inf")
    return top


class RowConstraints:
    """The grammar and logits processors of one request, applied to its verify rows.

    ``state`` is the grammar after the tokens emitted so far (None: no grammar);
    ``processors`` are called as llama-cpp-python calls them: ``f(input_ids, scores) ->
    scores`` on the full row, with ``input_ids`` the prompt, the output and, for a verify
    row, the drafts before it."""

    def __init__(
        self,
        params: SamplingParams,
        n_vocab: int,
        state: Optional[GrammarState] = None,
        processors: Optional[Sequence] = None,
    ):
        self.params = params
        self.n_vocab = n_vocab
        self.state = state
        self.processors = list(processors or [])
        # What the walk may stop at (top-p, min-p apply to sampling only).
        self.top_p = 1.0 if params.greedy else float(params.top_p)
        self.min_p = 0.0 if params.greedy else float(params.min_p)
        if params.greedy:
            self.m = 1
        elif params.top_k > 0:
            self.m = int(params.top_k)
        else:
            self.m = n_vocab
        self.grammar_seconds = 0.0  # spent in the grammar (the walk included)
        self.grammar_rows = 0
        self.processor_seconds = 0.0

    def close(self) -> None:
        if self.state is not None:
            self.state.close()
            self.state = None

    def follow(self, drafts: Sequence[int]) -> tuple:
        """(n, states): the first n drafts are allowed one after another; states[i] is the
        grammar after drafts[:i] (i = 0..n; states[0] is the current state, not a copy)."""
        states = [self.state]
        if self.state is None:
            return len(drafts), [None] * (len(drafts) + 1)
        for d in drafts:
            current = states[-1]
            if not current.allowed([d])[0]:
                break
            following = current.copy()
            following.accept(int(d))
            states.append(following)
        return len(states) - 1, states

    def allowed_run(self, tokens: Sequence[int]) -> int:
        """How many leading ``tokens`` the grammar allows one after another (all of them
        without a grammar). The walk of ``follow`` on one copy of the state, kept apart from
        it because the drafter asks this of every candidate run: ``follow`` copies the
        state once per token, which the verify rows need and a yes/no answer does not."""
        if self.state is None or not len(tokens):
            return len(tokens)
        state = self.state.copy()
        try:
            for i, t in enumerate(tokens):
                if not state.allowed([t])[0]:
                    return i
                state.accept(int(t))
            return len(tokens)
        finally:
            state.close()

    def rows(
        self,
        raw_rows: np.ndarray,
        context: Sequence[int],
        drafts: Sequence[int],
        states: list,
        window: Optional[np.ndarray],
        position: int,
    ) -> np.ndarray:
        """The rows to verify: ``raw_rows[i]`` (the target's logits after ``drafts[:i]``)
        through the processors, with what the grammar in ``states[i]`` forbids at -inf.
        ``window``: the tokens the penalties look back on (checked whatever their logit)."""
        out = np.empty((raw_rows.shape[0], self.n_vocab), dtype=np.float32)
        for i in range(raw_rows.shape[0]):
            row = raw_rows[i]
            top = None  # the row's maximum, once a check has found it
            if self.processors:
                t0 = time.perf_counter()
                ids = np.asarray(list(context) + list(drafts[:i]), dtype=np.intc)
                row = np.array(row, dtype=np.float32)  # a copy: processors may write in place
                for processor in self.processors:
                    result = processor(ids, row)
                    row = np.asarray(result, dtype=np.float32)
                    if row.shape != (self.n_vocab,):
                        raise InvalidInputError(
                            f"logits processor {processor!r} returned shape "
                            f"{row.shape}, expected ({self.n_vocab},)"
                        )
                top = _check_row(
                    row, f"the logits after processor {processor!r} (position {position + i})"
                )
                self.processor_seconds += time.perf_counter() - t0
            if states[i] is None:
                out[i] = row
                continue
            t0 = time.perf_counter()
            if top is None:
                top = _check_row(row, f"the target's logits at position {position + i}")
            always = window
            if window is not None and i:
                always = np.concatenate([window, np.asarray(drafts[:i])])
            keep = kept_tokens(
                states[i], row, self.m, always, top_p=self.top_p, min_p=self.min_p, top=top
            )
            if keep.size == 0:
                raise InvalidRequestError(f"the grammar allows no token at position {position + i}")
            out[i].fill(-np.inf)
            out[i, keep] = row[keep]
            self.grammar_seconds += time.perf_counter() - t0
            self.grammar_rows += 1
        return out

    def advance(self, states: list, n_accepted: int, token: int) -> None:
        """The grammar after the accepted drafts and the emitted token; the other states
        (rejected drafts) are freed."""
        if self.state is None:
            return
        for i, s in enumerate(states):
            if i != n_accepted and s is not self.state:
                s.close()
        if states[n_accepted] is not self.state:
            self.state.close()
            self.state = states[n_accepted]
        self.state.accept(int(token))

    def discard(self, states: list) -> None:
        """Frees the draft states of a round that did not finish."""
        for s in states:
            if s is not None and s is not self.state:
                s.close()
