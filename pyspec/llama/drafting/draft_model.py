"""A small GGUF model as the drafter: its own llama.cpp context, the target's tokenizer."""

from __future__ import annotations

import ctypes
import time
from typing import Optional

import numpy as np

from pyspec.llama.drafting.base import Draft, Drafter, common_prefix
from pyspec.llama.huge_pages import HugePages, into_huge_pages, read_weights_in
from pyspec.llama.options import check_draft_p_min
from pyspec.llama.prefix_reuse import PrefixReuse
from pyspec.params import SamplingParams
from pyspec.request import LogitsPointer, SparseDraftProbs
from pyspec.rng import Purpose, uniform
from pyspec.verifier import distribution_sparse


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
    cheap to pass). ``flash_attn``: as llama-cpp-python's (SpeculativeLlama passes its
    target's: the draft's pass over a long prompt runs about 7% faster with it on an AMX
    Xeon, and llama.cpp's own tools turn it on for both models).
    """

    name = "draft-model"

    def __init__(
        self,
        model,
        *,
        p_min: float = 0.0,
        draft_top_k: int = 40,
        n_ctx: Optional[int] = None,
        n_threads: Optional[int] = None,
        n_batch: int = 512,
        verbose: bool = False,
        huge_pages: bool = True,
        flash_attn: bool = False,
    ):
        import llama_cpp

        check_draft_p_min(p_min)
        if isinstance(model, llama_cpp.Llama):
            self.llama = model
            self._owned = False
            self.huge_pages = HugePages(why_not="loaded by the caller, not by pyspec")
        else:
            kwargs = dict(
                model_path=str(model),
                n_ctx=n_ctx or 4096,
                n_batch=n_batch,
                logits_all=False,
                verbose=verbose,
                flash_attn=flash_attn,
            )
            if n_threads:
                kwargs["n_threads"] = n_threads
            if read_weights_in(huge_pages):  # (as the target's: huge_pages.py)
                kwargs["use_mmap"] = False
            # Its weights in 2 MB pages too: the draft model decodes once per drafted token.
            with into_huge_pages(huge_pages) as self.huge_pages:
                self.llama = llama_cpp.Llama(**kwargs)
            self._owned = True
        from pyspec.llama.batch_decoder import BatchDecoder

        self.p_min, self.draft_top_k = p_min, draft_top_k
        self.n_vocab = self.llama.n_vocab()
        self.n_ctx = self.llama.n_ctx()
        self._decoder = BatchDecoder(self.llama.ctx, self.n_vocab, self.llama.n_batch)
        self._evaluated: list = []  # what the draft's KV cache holds, in order
        self._last_row = 0  # address of the logits after the last evaluated token
        self._round = 0  # draws of each round of a request use their own Philox stream
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
        from pyspec.llama.compat import check_compatible

        check_compatible(target, self.llama)
        self.target_vocab = target.n_vocab()

    def _common_prefix(self, context: list) -> int:
        """How many leading tokens of ``context`` the draft's KV cache already holds."""
        return common_prefix(context, self._evaluated)

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
            chunk = todo[i : i + step]
            self._last_row = self._decoder.decode(chunk, len(self._evaluated), 1)
            self._reuse.decoded(len(self._evaluated), len(chunk))
            self._evaluated.extend(chunk)
        if first:
            row = np.ctypeslib.as_array(
                (ctypes.c_float * self.n_vocab).from_address(self._last_row)
            )
            self._saved_row = np.array(row, copy=True)
            self._last_row = self._saved_row.ctypes.data
            self._reuse.save(context, start, self._saved_row)
        return len(todo)

    def _params(self, params: SamplingParams) -> SamplingParams:
        if params.greedy:  # probabilities are needed for p_min; the draft is the argmax
            return SamplingParams(
                temperature=1.0, top_k=self.draft_top_k, top_p=1.0, min_p=0.0, seed=params.seed
            )
        top_k = params.top_k if 0 < params.top_k <= self.draft_top_k else self.draft_top_k
        return SamplingParams(
            temperature=params.temperature,
            top_k=top_k,
            top_p=params.top_p,
            min_p=params.min_p,
            seed=params.seed,
        )

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
        return Draft(
            tokens,
            sparse,
            elapsed,
            steady_seconds=steady,
            catch_up_tokens=n_new,
            catch_up_seconds=t_catch_up,
            costly=True,
        )
