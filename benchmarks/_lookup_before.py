"""The prompt lookup as it searched before the suffix index (git 8875293): a Python dict per
n-gram length (n-gram -> latest end), the latest occurrence of the longest suffix, no counts,
no per-token kinds, no memory. The copy cursor and the edits are the same code as today's
(inherited). For the draftless benchmark's "before" column only; the library never imports it."""

from __future__ import annotations

from pyspec.llama.drafting.lookup import PromptLookup


class PromptLookupBefore(PromptLookup):
    name = "lookup (before)"

    def _reset(self):
        super()._reset()
        self._grams = [dict() for _ in range(self.max_ngram + 1)]  # [n]: n-gram -> latest end

    def use_memory(self, memory) -> None:
        self.memory = None  # it had none

    def _sync(self, context) -> None:
        before = len(self._list)
        super()._sync(context)
        if len(self._list) < before or not before:
            self._grams = [dict() for _ in range(self.max_ngram + 1)]
            before = 0
        seq = self._list
        for end in range(max(before, 1), len(seq)):  # an n-gram is indexed once it has a follower
            for n in range(self.min_ngram, min(self.max_ngram, end) + 1):
                self._grams[n][tuple(seq[end - n : end])] = end

    def _candidates(self, max_tokens: int, every_length: bool = False):
        seq = self._list
        if max_tokens <= 0:
            return
        if self._cursor is not None:
            out = self._virtual(self._cursor, max_tokens, len(seq))
            yield self._cursor, self._run, out, [None] * len(out), None
        for n in range(min(self.max_ngram, len(seq)), self.min_ngram - 1, -1):
            end = self._grams[n].get(tuple(seq[len(seq) - n :]))
            if end is not None:
                out = self._virtual((end, ()), max_tokens, len(seq))
                yield (end, ()), n, out, [None] * len(out), None

    def _take(self, candidate, t0, n=None):
        draft = super()._take(candidate, t0, n)
        draft.token_kinds = None  # one acceptance rate per bucket, as before
        return draft
