"""The memory of earlier requests: what a model was asked and answered before, searched
for drafts after the request's own tokens.

One suffix index (``pyspec.suffix_index``) over the earlier requests' prompts and outputs,
one document each (a separator between them, so no draft runs from one into the next),
capped in tokens: when it holds more than ``max_tokens``, the oldest documents go (the index
is rebuilt from the rest, about a millisecond per 10,000 tokens, once per quarter of the
cap). A chat's next turn carries the last one as its history: a request whose prompt
starts with the latest document replaces it rather than storing it twice. A second index
holds the documents' outputs (the answers: text a model wrote, each after the few prompt
tokens before it), so that text sent twice in prompts (a long system prompt, a tool schema,
a file attached twice) is not taken for text a model reproduces (``agreeing_run``).

Thread-safe (one lock): the server's requests may end and draft concurrently.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Optional

import numpy as np

from pyspec.errors import InvalidInputError
from pyspec.suffix_index import SEPARATOR, SuffixDraft, SuffixIndex

DEFAULT_MAX_TOKENS = 65536
MIN_MATCH = 2  # a one-token match across requests says little


@dataclass
class MemoryStats:
    tokens: int = 0  # tokens held now
    documents: int = 0  # requests held now
    lookups: int = 0  # drafts asked of the memory
    hits: int = 0  # drafts it gave
    evicted: int = 0  # requests dropped for room

    @property
    def hit_rate(self) -> float:
        return self.hits / self.lookups if self.lookups else 0.0


class RequestMemory:
    def __init__(self, max_tokens: int = DEFAULT_MAX_TOKENS, max_match: int = 16):
        if max_tokens < 1:
            raise InvalidInputError(f"max_tokens must be >= 1, got {max_tokens}")
        self.max_tokens, self.max_match = int(max_tokens), int(max_match)
        self._lock = threading.Lock()
        self._documents: deque = deque()  # (np.int32 array, prompt tokens in it), oldest first
        self._index = SuffixIndex(self.max_match)
        self._answers = SuffixIndex(self.max_match)  # the outputs, after their prompts' tails
        self._held = 0
        self.stats = MemoryStats()

    def __len__(self) -> int:
        return self._held

    def add(self, tokens, n_prompt: Optional[int] = None) -> None:
        """Stores one finished request: its prompt and output, the first ``n_prompt`` tokens
        the prompt (None: not known, and nothing of it counts as an answer)."""
        tokens = np.asarray(tokens, dtype=np.int32)
        doc = tokens[-self.max_tokens :]
        if not doc.size:
            return
        if n_prompt is None:
            n_prompt = tokens.size
        if not 0 <= n_prompt <= tokens.size:
            raise InvalidInputError(f"n_prompt must be in [0, {tokens.size}], got {n_prompt}")
        n_prompt = max(0, n_prompt - (tokens.size - doc.size))  # (a cut document's)
        with self._lock:
            last = self._documents[-1][0] if self._documents else None
            if (
                last is not None
                and last.size <= doc.size
                and np.array_equal(doc[: last.size], last)
            ):
                # The next turn of the same chat: it holds the last one whole (its answer
                # now in the history, the new prompt).
                _, last_prompt = self._documents.pop()
                self._held -= last.size
                self._index.truncate(len(self._index) - last.size - 1)
                answer = self._answer(last, last_prompt)
                if answer is not None:
                    self._answers.truncate(len(self._answers) - answer.size)
            self._documents.append((doc, n_prompt))
            self._held += doc.size
            self._index.append(np.append(doc, SEPARATOR).astype(np.int32))
            answer = self._answer(doc, n_prompt)
            if answer is not None:
                self._answers.append(answer)
            if self._held > self.max_tokens:
                self._evict()
            self.stats.tokens, self.stats.documents = self._held, len(self._documents)

    def _answer(self, doc, n_prompt: int):
        """What the answers' index holds of one document (None: it has no output): the
        output, after the prompt's last ``max_match`` tokens (so that a match can run from
        the prompt's end into the answer, as a new answer's first drafts need), and a
        separator."""
        if doc.size <= n_prompt:
            return None
        return np.append(doc[max(0, n_prompt - self.max_match) :], SEPARATOR).astype(np.int32)

    def _evict(self) -> None:
        """Drops the oldest documents down to 3/4 of the cap (so a rebuild is rare)."""
        while self._documents and self._held > self.max_tokens * 3 // 4:
            self._held -= self._documents.popleft()[0].size
            self.stats.evicted += 1
        self._index = SuffixIndex(self.max_match)
        self._answers = SuffixIndex(self.max_match)
        if self._documents:
            parts = [np.append(d, SEPARATOR) for d, _ in self._documents]
            self._index.append(np.concatenate(parts).astype(np.int32))
            answers = [a for a in (self._answer(d, n) for d, n in self._documents) if a is not None]
            if answers:
                self._answers.append(np.concatenate(answers))

    def draft(self, pattern, max_tokens: int, min_match: int = MIN_MATCH) -> SuffixDraft:
        """The memory's draft from a match of at least ``min_match`` tokens (none shorter:
        the search stops there, and only drafts given count as hits)."""
        with self._lock:
            self.stats.lookups += 1
            found = self._index.draft(pattern, max_tokens, min_match=min(min_match, self.max_match))
            if found.tokens:
                self.stats.hits += 1
            return found

    def agreeing_run(self, pattern, tokens, min_match: int, min_occurrences: int = 2) -> int:
        """How many leading ``tokens`` the earlier requests hold after the match of
        ``pattern`` (at least ``min_match`` tokens) in every occurrence that goes on, with at
        least ``min_occurrences`` of them going on at each token, and the earlier answers
        (outputs) hold after such a match too, never otherwise: text that earlier requests
        held twice or more, a model wrote at least once, and nothing continued otherwise.
        Text held only in prompts (a system prompt every request sends) does not count: a
        model has not been seen to reproduce it. Not counted as a lookup."""
        if not len(tokens):
            return 0
        min_match = min(min_match, self.max_match)
        with self._lock:
            found = self._index.draft(pattern, len(tokens), min_match=min_match)
            answered = self._answers.draft(pattern, len(tokens), min_match=min_match)
        run = 0
        for token, count, total in zip(found.tokens, found.counts, found.totals):
            if token != tokens[run] or count != total or total < min_occurrences:
                break
            if run >= len(answered.tokens) or answered.tokens[run] != token:
                break
            if answered.counts[run] != answered.totals[run]:
                break
            run += 1
        return run

    def clear(self) -> None:
        with self._lock:
            self._documents.clear()
            self._index = SuffixIndex(self.max_match)
            self._answers = SuffixIndex(self.max_match)
            self._held = 0
            self.stats = MemoryStats()
