"""Drafters: where the speculative loop's guesses come from.

Every drafter answers ``draft(context, max_tokens, params, position) -> Draft``:
``context`` is every token so far (prompt and output, the last one not yet evaluated by the
target), ``position`` the absolute position of the first drafted token. A ``Draft`` holds
the guessed ids and, when they were sampled, the distributions they were sampled from (one
sparse row per token) so the verifier can run true rejection sampling; without them the
drafts are point masses and the verifier emits exactly what plain sampling would.
"""
from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..params import SamplingParams
from ..rng import Purpose, uniform
from ..request import LogitsPointer, SparseDraftProbs
from ..verifier import distribution_sparse
from .prefix_reuse import PrefixReuse


@dataclass
class Draft:
    tokens: list
    probs: Optional[SparseDraftProbs] = None
    seconds: float = 0.0  # time the drafter spent
    bucket: object = None  # groups drafts of similar reliability for the acceptance estimate
    steady_seconds: Optional[float] = None  # cost when drafting every round (default: seconds)
    catch_up_tokens: int = 0  # tokens evaluated before drafting (a costly drafter's catch-up)
    catch_up_seconds: float = 0.0


class Drafter:
    """Base class. A drafter whose ``free`` is True costs next to nothing, so the loop asks
    it for ``draft_max`` tokens and lets the cost model decide how many to verify."""

    name = "drafter"
    free = False

    def draft(self, context: np.ndarray, max_tokens: int, params: SamplingParams,
              position: int) -> Draft:
        raise NotImplementedError

    def draft_constrained(self, context: np.ndarray, max_tokens: int, params: SamplingParams,
                          position: int, allowed_run) -> Draft:
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

    def close(self) -> None:
        pass


class PromptLookup(Drafter):
    """N-gram lookup in the prompt and the output so far (prompt lookup decoding), made
    variable-length, incremental and edit-aware.

    - Lookup: the most recent earlier occurrence of the longest suffix of ``max_ngram`` down
      to ``min_ngram`` tokens; its followers are the draft. An index n-gram -> latest end
      grows with the context, so a call costs O(new tokens), not O(context).
    - Copy cursor: once a draft is taken from somewhere, the output is followed along that
      source token by token, so the next draft continues the copy instead of jumping to
      whatever most recent place shares the last few tokens (which, in code, is often the
      wrong line).
    - Edits: when the output leaves the source (a renamed variable, say) and rejoins it a
      few tokens later, the cursor re-anchors after the skipped source tokens and the pair
      (source tokens -> output tokens) is remembered as a substitution that later drafts
      apply: after the first rename, "total_price" in the source is drafted as "amount".
      A substitution the output contradicts (the old tokens come out unchanged) is dropped.
    """

    name = "lookup"
    free = True
    COPY_RUN = 4  # tokens followed (or n-gram length) from which a draft counts as a copy

    def __init__(self, max_ngram: int = 8, min_ngram: int = 1, *, resync_window: int = 24,
                 max_edit: int = 8):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        if resync_window < 1 or max_edit < 1:
            raise ValueError("resync_window and max_edit must be >= 1")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.resync_window, self.max_edit = resync_window, max_edit
        self._reset()

    def start_request(self) -> None:
        # Indexed afresh for every request (a few ms for a long prompt): copies and edits
        # learned from an earlier request's output would make this request's drafts depend
        # on what came before it.
        self._reset()

    def _reset(self):
        self._tokens = np.zeros(0, dtype=np.int64)
        self._list: list = []
        self._index = [dict() for _ in range(self.max_ngram + 1)]  # [n]: ngram -> end
        self._cursor = None     # (source index of the next expected token, pending sub tokens)
        self._divergence = None  # (source index, output index, run) where the output left the copy
        self._run = 0  # tokens the output has followed the current source for
        self._subs: dict = {}   # first old token -> {old tuple: new tuple}

    # ---- substitutions ---------------------------------------------------------------
    def _sub_at(self, c: int):
        """The (old, new) substitution whose old tokens start at source index c, if any
        (longest first)."""
        seq = self._list
        for old, new in sorted(self._subs.get(seq[c], {}).items(), key=lambda kv: -len(kv[0])):
            if tuple(seq[c:c + len(old)]) == old:
                return old, new
        return None

    def _virtual(self, cursor, limit: int, stop: int) -> list:
        """Up to `limit` tokens of the copy from `cursor` with substitutions applied, reading
        the source only below index `stop`."""
        c, pending = cursor
        out = list(pending[:limit])
        seq = self._list
        while len(out) < limit and c < stop:
            sub = self._sub_at(c)
            if sub is not None and c + len(sub[0]) <= stop:
                out.extend(sub[1][:limit - len(out)])
                c += len(sub[0])
            else:
                out.append(seq[c])
                c += 1
        return out

    # ---- following the output ----------------------------------------------------------
    def _advance(self, j: int) -> None:
        """Moves the copy cursor over output token seq[j], or records a divergence."""
        seq, t = self._list, self._list[j]
        c, pending = self._cursor
        if pending:
            if pending[0] == t:
                self._cursor = (c, pending[1:])
                self._run += 1
                return
        elif c < j:
            sub = self._sub_at(c)
            if sub is not None:
                old, new = sub
                if new and new[0] == t:
                    self._cursor = (c + len(old), tuple(new[1:]))
                    self._run += 1
                    return
                if t == old[0]:  # the output kept the old tokens: forget the substitution
                    del self._subs[old[0]][old]
            if seq[c] == t:
                self._cursor = (c + 1, ())
                self._divergence = None  # following a source again
                self._run += 1
                return
        self._cursor = None
        # A divergence still waiting to re-join keeps precedence over this one: the cursor
        # that just failed may have been a stop-gap lookup taken while waiting.
        if self._divergence is None and not pending and c < j:
            self._divergence = (c, j, self._run)
        self._run = 0

    def _resync(self, j: int) -> None:
        """After a divergence: if the output since then ends with tokens found just after the
        divergence point in the source, follow the source from there and learn the edit."""
        src, out, run = self._divergence
        seq = self._list
        if j - out > self.resync_window:
            self._divergence = None
            return
        for n in (3, 2, 1):
            first = j - n + 1  # the re-joining n-gram is seq[first:j+1]
            if first < out or first == out and n == 1 and j == out:
                continue  # the divergent token itself cannot be the re-join
            gram = seq[first:j + 1]
            for p in range(src, min(src + self.resync_window, first - n + 1)):
                if seq[p:p + n] == gram:
                    old, new = tuple(seq[src:p]), tuple(seq[out:first])
                    if old and old != new and len(old) <= self.max_edit and len(new) <= self.max_edit:
                        self._subs.setdefault(old[0], {})[old] = new
                    self._cursor = (p + n, ())
                    self._divergence = None
                    self._run = run + n  # the copy that was left goes on
                    return

    def _sync(self, context) -> None:
        ctx = np.asarray(context, dtype=np.int64)
        old = self._tokens
        if ctx.size < old.size or not np.array_equal(ctx[: old.size], old):
            self._reset()  # a new or rewritten context: index it from scratch
            old = self._tokens
        new_tail = ctx[old.size:].tolist()
        self._list.extend(new_tail)
        seq = self._list
        # An n-gram ending at `end` (exclusive) is indexed once its follower seq[end] exists;
        # the context's own suffix (end == len) is what gets looked up.
        for end in range(max(old.size, 1), len(seq)):
            for n in range(self.min_ngram, min(self.max_ngram, end) + 1):
                self._index[n][tuple(seq[end - n:end])] = end
        if old.size:  # follow the new output tokens (not a fresh prompt)
            for j in range(old.size, len(seq)):
                if self._cursor is not None:
                    self._advance(j)
                if self._cursor is None and self._divergence is not None:
                    self._resync(j)
        self._tokens = ctx

    def _candidates(self, max_tokens: int):
        """(cursor, run, tokens) in order of preference: the copy being followed, then the
        latest occurrence of the longest suffix match, then of shorter ones."""
        seq = self._list
        if max_tokens <= 0:
            return
        if self._cursor is not None:
            yield self._cursor, self._run, self._virtual(self._cursor, max_tokens, len(seq))
        for n in range(min(self.max_ngram, len(seq)), self.min_ngram - 1, -1):
            end = self._index[n].get(tuple(seq[len(seq) - n:]))
            if end is not None:
                yield (end, ()), n, self._virtual((end, ()), max_tokens, len(seq))

    def _take(self, cursor, run, out: list, t0: float) -> Draft:
        if cursor is not self._cursor:  # a new source: follow it from here
            self._cursor, self._run = cursor, run
        # A copy the output has followed for a while (or a long n-gram match) passes far
        # more often than a guess from a short match: the cost model keeps them apart.
        bucket = ("copy" if self._run >= self.COPY_RUN else "guess") if out else None
        return Draft(list(out), None, time.perf_counter() - t0, bucket)

    def draft(self, context, max_tokens, params, position):
        t0 = time.perf_counter()
        self._sync(context)
        for cursor, run, out in self._candidates(max_tokens):
            if out:
                return self._take(cursor, run, out, t0)
        return Draft([], None, time.perf_counter() - t0, None)

    def draft_constrained(self, context, max_tokens, params, position, allowed_run):
        """The candidate the grammar allows furthest (the first such in order of
        preference), cut where the grammar forbids it: when the copy being followed breaks
        the grammar (a value copied into a field whose type forbids it), an older
        occurrence of the same context may not."""
        t0 = time.perf_counter()
        self._sync(context)
        best = None
        for cursor, run, out in self._candidates(max_tokens):
            n = allowed_run(out) if out else 0
            if best is None or n > best[3]:
                best = (cursor, run, out, n)
            if out and n == len(out):
                break
        if best is None or best[3] == 0:
            return Draft([], None, time.perf_counter() - t0, None)
        cursor, run, out, n = best
        return self._take(cursor, run, out[:n], t0)


class CallableDrafter(Drafter):
    """Any llama-cpp-python ``LlamaDraftModel`` (or callable ``ids -> draft ids``), unchanged:
    its drafts are point masses."""

    name = "callable"
    free = True  # assumed cheap, like llama-cpp-python's prompt lookup

    def __init__(self, fn, n_vocab: int):
        self.fn, self.n_vocab = fn, n_vocab

    def draft(self, context, max_tokens, params, position):
        t0 = time.perf_counter()
        ids = np.asarray(self.fn(np.asarray(context, dtype=np.intc)))
        if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
            raise ValueError(f"the draft model returned {ids.dtype} ids of shape {ids.shape}; "
                             "it must return a 1-D array of token ids")
        ids = ids[:max_tokens].astype(np.int64)
        bad = np.flatnonzero((ids < 0) | (ids >= self.n_vocab))
        if bad.size:
            raise ValueError(f"the draft model returned token id {int(ids[bad[0]])} at index "
                             f"{int(bad[0])}, outside the target's vocabulary [0, {self.n_vocab})")
        return Draft(ids.tolist(), None, time.perf_counter() - t0)


def draw_from(ids: np.ndarray, probs: np.ndarray, u):
    """The draft token(s) for uniform(s) u: inverse CDF over (ids, probs) in their order.
    The verifier is told q = probs, so this must draw exactly from probs (its acceptance
    rate is tested against sum(min(p, q)) over 100,000 uniforms)."""
    cum = np.cumsum(probs, dtype=np.float64)
    at = np.searchsorted(cum, np.asarray(u) * cum[-1], side="right")
    return ids[np.minimum(at, ids.size - 1)]


class DraftModel(Drafter):
    """A small GGUF model in its own llama.cpp context, sharing the target's tokenizer.

    It keeps its KV cache across rounds (evaluates only tokens it has not seen, removes the
    ones the target rejected), samples its drafts with pyspec's own sampler on the DRAFT
    random stream and hands the verifier the sparse distributions it drew from, so
    temperature > 0 gets true rejection sampling. It stops drafting early when its most
    likely token has probability below ``p_min`` (llama.cpp's ``--draft-p-min``).

    ``model``: a path to a GGUF file or a ``llama_cpp.Llama``. ``draft_top_k`` caps the
    draft's candidate set when the target's top-k is off (any q is exact; a small one is
    cheap to pass).
    """

    name = "draft-model"

    def __init__(self, model, *, p_min: float = 0.0, draft_top_k: int = 40,
                 n_ctx: Optional[int] = None, n_threads: Optional[int] = None,
                 n_batch: int = 512, verbose: bool = False):
        import llama_cpp

        if not 0.0 <= p_min < 1.0:
            raise ValueError(f"p_min must be in [0, 1), got {p_min}")
        if isinstance(model, llama_cpp.Llama):
            self.llama = model
            self._owned = False
        else:
            kwargs = dict(model_path=str(model), n_ctx=n_ctx or 4096, n_batch=n_batch,
                          logits_all=False, verbose=verbose)
            if n_threads:
                kwargs["n_threads"] = n_threads
            self.llama = llama_cpp.Llama(**kwargs)
            self._owned = True
        from ._decode import BatchDecoder

        self.p_min, self.draft_top_k = p_min, draft_top_k
        self.n_vocab = self.llama.n_vocab()
        self.n_ctx = self.llama.n_ctx()
        self._decoder = BatchDecoder(self.llama.ctx, self.n_vocab, self.llama.n_batch)
        self._evaluated: list = []  # what the draft's KV cache holds, in order
        self._last_row = 0  # address of the logits after the last evaluated token
        self._round = 0     # draws of each round of a request use their own Philox stream
        # The first catch-up of a request is what its cache state could make differ from a
        # fresh drafter's (prefix_reuse.py): a repeated request re-uses it exactly.
        self._reuse = PrefixReuse(self.llama.n_batch)
        self._first_of_request = True
        self._saved_row: Optional[np.ndarray] = None  # a saved row in use (kept alive)
        self.target_vocab = self.n_vocab
        # A borrowed Llama may hold cells from earlier use: start from an empty cache.
        self._decoder.remove_from(0)
        self._release()

    def start_request(self) -> None:
        # The streams count rounds from 1 in every request, so that a seed gives the same
        # draws request after request, as it does in llama-cpp-python.
        self._round = 0
        self._first_of_request = True

    def set_reproducible(self, on: bool) -> None:
        self._reuse.canonical = bool(on)

    def close(self):
        self._decoder.close()
        if self._owned:
            self.llama.close()

    def check_compatible(self, target) -> None:
        from .compat import check_compatible

        check_compatible(target, self.llama)
        self.target_vocab = target.n_vocab()

    def _common_prefix(self, context: list) -> int:
        """How many leading tokens of ``context`` the draft's KV cache already holds."""
        evaluated = self._evaluated
        if context[:len(evaluated)] == evaluated:
            return len(evaluated)
        common, limit = 0, min(len(context), len(evaluated))
        while common < limit and context[common] == evaluated[common]:
            common += 1
        return common

    def catch_up_tokens(self, context) -> int:
        context = context.tolist() if isinstance(context, np.ndarray) else list(context)
        return max(1, len(context) - self._common_prefix(context))

    def _release(self) -> None:
        """Tells llama-cpp-python that its cached state is not what it thinks (its own loop
        must re-evaluate if this Llama is also used directly)."""
        self.llama.n_tokens = 0
        self.llama._requires_eval = True

    def _remove_from(self, position: int) -> None:
        if position < len(self._evaluated):
            self._decoder.remove_from(position)
            self._reuse.removed_from(position)
            del self._evaluated[position:]

    def _catch_up(self, context: list) -> int:
        """Brings the KV cache to exactly `context`, evaluating only what it lacks; returns
        how many tokens it evaluated. The first catch-up of a request is remembered (start,
        last row), and the same context at the start of a later request re-uses it instead
        of evaluating its last token alone."""
        common = self._common_prefix(context)
        first, self._first_of_request = self._first_of_request, False
        if first:
            repeat = self._reuse.repeat_of(context, common)
            if repeat is not None:
                self._remove_from(len(context))
                self._saved_row = repeat.row
                self._last_row = repeat.row.ctypes.data
                return 0
            start = self._reuse.keep(common, len(context))
        else:
            start = min(common, len(context) - 1)  # the last token is evaluated for its logits
        self._remove_from(start)
        todo = context[start:]
        step = self.llama.n_batch
        for i in range(0, len(todo), step):
            chunk = todo[i:i + step]
            self._last_row = self._decoder.decode(chunk, len(self._evaluated), 1)
            self._reuse.decoded(len(self._evaluated), len(chunk))
            self._evaluated.extend(chunk)
        if first:
            row = np.ctypeslib.as_array((ctypes.c_float * self.n_vocab).from_address(self._last_row))
            self._saved_row = np.array(row, copy=True)
            self._last_row = self._saved_row.ctypes.data
            self._reuse.save(context, start, self._saved_row)
        return len(todo)

    def _params(self, params: SamplingParams) -> SamplingParams:
        if params.greedy:  # probabilities are needed for p_min; the draft is the argmax
            return SamplingParams(temperature=1.0, top_k=self.draft_top_k, top_p=1.0, min_p=0.0,
                                  seed=params.seed)
        top_k = params.top_k if 0 < params.top_k <= self.draft_top_k else self.draft_top_k
        return SamplingParams(temperature=params.temperature, top_k=top_k, top_p=params.top_p,
                              min_p=params.min_p, seed=params.seed)

    def point_mass(self, params):
        return params.greedy  # sampled drafts carry their distribution q

    def draft(self, context, max_tokens, params, position):
        t0 = time.perf_counter()
        context = context.tolist() if isinstance(context, np.ndarray) else list(context)
        max_tokens = min(max_tokens, self.n_ctx - len(context) - 1)
        if max_tokens <= 0:
            return Draft([], None, time.perf_counter() - t0)
        n_new = self._catch_up(context)
        t_catch_up = time.perf_counter() - t0
        dparams = self._params(params)
        self._round += 1
        tokens, rows = [], []
        for j in range(max_tokens):
            ids, probs = distribution_sparse(LogitsPointer(self._last_row, self.n_vocab), dparams)
            if probs[0] < self.p_min:  # kept sets are ranked: probs[0] is the top one
                break
            if self.target_vocab < self.n_vocab:  # ids the target lacks have p = 0 there
                inside = ids < self.target_vocab
                ids, probs = ids[inside], probs[inside]
                if not ids.size:
                    break
                probs = probs / probs.sum(dtype=np.float64)  # q is what x is drawn from
            if params.greedy:
                x = int(ids[0])
            else:
                u = uniform(params.seed, position + j, Purpose.DRAFT, stream=self._round)
                x = int(draw_from(ids, probs, u))
            tokens.append(x)
            rows.append((ids, probs))
            if j + 1 < max_tokens:
                self._last_row = self._decoder.decode([x], len(self._evaluated), 1)
                self._evaluated.append(x)
        sparse = None
        if tokens and not params.greedy:
            width = max(ids.size for ids, _ in rows)
            tok_arr = np.zeros((len(rows), width), dtype=np.int32)
            prob_arr = np.zeros((len(rows), width), dtype=np.float32)
            for r, (ids, probs) in enumerate(rows):
                tok_arr[r, : ids.size] = ids
                prob_arr[r, : probs.size] = probs
            sparse = SparseDraftProbs(tok_arr, prob_arr)
        self._release()
        elapsed = time.perf_counter() - t0
        # What drafting costs once the draft keeps pace (one catch-up token per round); a long
        # catch-up after plain rounds is not what more drafting would cost.
        steady = t_catch_up / max(n_new, 1) + (elapsed - t_catch_up)
        return Draft(tokens, sparse, elapsed, steady_seconds=steady, catch_up_tokens=n_new,
                     catch_up_seconds=t_catch_up)
