"""Prompt lookup: drafts copied from the request's own tokens and from earlier requests.

The search is libpyspec's suffix index (``pyspec.suffix_index``, ``csrc/suffix_index.c``):
the longest earlier match of the recent tokens, and the continuation most of its
occurrences agree on, with counts. Around it, what a copy needs that a search alone does
not give (measured on code edits, tests/test_lookup.py):

- a copy cursor: once a draft is taken from somewhere, the output is followed along that
  source token by token, so the next draft continues the copy instead of jumping to
  whatever place shares the last few tokens (which, in code, is often the wrong line);
- edits: when the output leaves the source (a renamed variable) and rejoins it a few tokens
  later, the cursor re-anchors after the skipped source tokens and the pair (source tokens
  -> output tokens) becomes a substitution that later drafts apply: after the first rename,
  "total_price" in the source is drafted as "amount". A substitution the output contradicts
  (the old tokens come out unchanged) is dropped;
- a memory of earlier requests (``request_memory.RequestMemory``), searched when the
  request's own tokens match one token at most, used where it matches 4 or more;
- a reproduction: an answer that copies prompt text from its first token, or from its
  first code fence (a file given to edit), is marked so (``Draft.reproduced``), read up to
  the instruction's next word (with ``token_text``, the vocabulary), and no draft of the
  copied text runs past its end.

Every drafted token carries a kind (``Draft.token_kinds``): where it came from (the copy
being followed, the request's own tokens, the memory), how long the match was, and how well
the occurrences agreed on it (one occurrence, all of several, a majority, a split). The
cost model learns an acceptance per kind and predicts a draft's yield token by token.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

import numpy as np

from pyspec.errors import InvalidInputError
from pyspec.llama.drafting.base import Draft, Drafter, common_prefix
from pyspec.llama.drafting.request_memory import RequestMemory
from pyspec.suffix_index import SuffixIndex

# A drafted token counts as remembered where the memory holds its context's continuation at
# least this often, an earlier answer among them, never otherwise (Draft.remembered): once
# in a request's prompt and again in its output is a copy the model made before.
REMEMBERED_OCCURRENCES = 2

# An answer reproduces its prompt when its first REPRODUCTION_RUN tokens (REPRODUCTION_RUN_FENCED
# where the copied text begins at a code fence, below) are one copy of the prompt's text
# (re-joins after small edits count on) and that text does not follow the same
# REPRODUCTION_LEAD tokens as the answer does. From then on, the drafts that continue
# that copy are marked ``Draft.reproduced``: a file given to edit and copied back goes on.
# Why the lead: the text that follows the same tokens as the answer (a chat template's
# assistant header: "assistant", "\n") is an earlier answer of the model, and an answer that
# starts as an earlier one did is a regeneration, which leaves it soon. Replayed on the
# recorded chats and edits (docs/drafting.md, "An answer that reproduces its prompt"): with
# the lead checked the chats were unchanged on every curve, order and recording while the
# 96-token edits gained 1-8%; without it, the chats that regenerate an earlier answer fell
# (a worst chat 0.67x-0.94x its speed without the rule).
REPRODUCTION_RUN = 8
REPRODUCTION_LEAD = 2

# A copied text that begins at one of the prompt's code fences (a block the request gave: a
# file to edit) reproduces it from REPRODUCTION_RUN_FENCED tokens: its opening line (the
# fence, the language, the newline) and the first token of the code. Why: an edit's answer
# starts with that line, and waiting for 8 tokens kept the first rounds of every edit plain
# or short, up to a sixth of a 96-token edit's cost on a CPU whose short batches cost nearly
# their tokens (the Zen 4 EPYC: 2 tokens 1.8x one). Why not the fence line alone (3): an
# answer that opens the same fence and writes code of its own (tests, a loader for another
# format) then had the prompt's file believed and failed at once, a request 0.83x-0.84x on
# the Zen 4's curves (benchmarks/_code_questions.py). Replayed (session 38, pyspec bench
# reproduction's workloads, thirteen curves, against 8 tokens): the 96-token edits +0% to
# +3% by the mean, the demo +0% to +5%, the full-file edits +0% to +2%, the code questions
# +0% to +1% (a worst request 0.95x: a file copied whole, then a function added), the chats
# and tool calls unchanged.
REPRODUCTION_RUN_FENCED = 4

# A reproduced draft stops before the first token the request's instruction names, and at
# the end of the copied text. Why: an edit request names what it changes ("rename
# `total_price`", "give low_stock a default"), so the places the answer leaves its copy are
# where those words come back; without the stops, the first edit of `pyspec demo`'s rename
# failed a believed draft of 63 tokens at its 9th. The instruction is the request's turn
# (the prompt's text between special tokens, which read as empty text) outside the copied
# text, which ends at the first code fence ("``") after its start, or with the turn; its
# words are its tokens with at least MENTION_MIN_CHARS letters, digits or underscores (not
# "a", "of", punctuation). A word the instruction shares with the text by chance ("item",
# "the") stops a draft early, which costs one shorter round; a missed edit costs a failed
# long one. Replayed (docs/drafting.md, "Where an edit request's words stop a reproduction"):
# against the loop before the rule, the demo went from 0.79x-0.96x to 0.99x-1.19x.
MENTION_MIN_CHARS = 3

# Learned stops: a source token at which the answer has left the copied text (an edit the
# instruction's words did not tell) stops later reproduced drafts too. Why: an edit asked
# of every like place ("Add type hints to every method") names no word of the file, so each
# believed draft ran into the next `def` line and failed: the file with type hints 0.80x plain
# on the Zen 4's curve with the rule on, 0.90x with it off (benchmarks/_code_questions.py,
# session 38). With the stops it is 0.90x; replayed on pyspec bench reproduction's other
# workloads and thirteen curves nothing else moved, the code questions +0% to +1.3% by the
# mean (sampled: -0.4% to +0.3%, a worst request 0.95x).

# An answer that begins with words of its own ("Here's the updated code:") and then copies a
# fenced block of the prompt from its opening fence reproduces it too, from that fence on
# (with a vocabulary, to see the fence): its copy is counted from the fence, and the text
# copied must not lie in an earlier answer (a turn that begins as the answer's does).
FENCED_REPRODUCTION = True
FENCE_LOOKBACK = 16  # how far back the answer's fence may lie when its copy is noticed
FENCE_TOKENS = 2  # tokens a code fence may take ("``" and "`\n")


def agreement(count: int, total: int) -> str:
    """How the occurrences of a match agreed on a drafted token."""
    if total <= 1:
        return "single"
    if count == total:
        return "unanimous"
    return "majority" if 2 * count > total else "split"


class PromptLookup(Drafter):
    name = "lookup"
    free = True
    COPY_RUN = 4  # tokens followed (or match length) from which a draft counts as a copy

    def __init__(
        self,
        max_ngram: int = 8,
        min_ngram: int = 1,
        *,
        resync_window: int = 24,
        max_edit: int = 8,
        max_occurrences: int = 32,
        token_text: Optional[Callable[[int], str]] = None,
    ):
        if not 1 <= min_ngram <= max_ngram:
            raise InvalidInputError(
                f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}"
            )
        if resync_window < 1 or max_edit < 1:
            raise InvalidInputError("resync_window and max_edit must be >= 1")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.resync_window, self.max_edit = resync_window, max_edit
        self.max_occurrences = max_occurrences
        # A token's text (special tokens: empty), to read a request's instruction: without
        # it no draft is marked reproduced (the reproduction rule needs the mention stops).
        # make_drafter gives it the target's.
        self.token_text = token_text
        self._texts: dict = {}  # token -> token_text's text (the vocabulary does not change)
        self.memory: Optional[RequestMemory] = None
        self.memory_lookups = self.memory_hits = 0  # of the request under way
        self._reset()

    # ---- requests ----------------------------------------------------------------------
    def use_memory(self, memory: Optional[RequestMemory]) -> None:
        """Searches ``memory`` after the request's own tokens, and stores every finished
        request in it (None: no memory)."""
        self.memory = memory

    def start_request(self) -> None:
        # Copies and edits learned from an earlier request's output stay out of this one's
        # own drafts (the memory, when on, is where earlier requests are searched).
        self._reset()
        self.memory_lookups = self.memory_hits = 0

    def end_request(self, context, n_prompt: Optional[int] = None) -> None:
        if self.memory is not None:
            self.memory.add(context, n_prompt)

    def set_reproducible(self, on: bool) -> None:
        if on:  # drafts as a fresh drafter would make them: nothing from earlier requests
            self.memory = None

    def read_with(self, token_text: Optional[Callable[[int], str]]) -> None:
        """Reads requests with ``token_text`` from now on (None: reads none)."""
        self.token_text = token_text
        self._texts = {}

    @property
    def reproducing(self) -> bool:
        """Whether the answer under way reproduces its prompt (REPRODUCTION_RUN, or
        REPRODUCTION_RUN_FENCED)."""
        return self._reproducing

    def _reset(self):
        self._index = SuffixIndex(self.max_ngram)
        self._list: list = []
        self._forget_copy()
        self._subs: dict = {}  # first old token -> {old tuple: new tuple}
        self._forget_answer()

    def _forget_answer(self):
        # Where the answer starts in _list: set by the request's first draft, whose context
        # is the prompt and the one token the prompt's own pass decided.
        self._answer_start: Optional[int] = None
        self._reproducing = False
        # Of the reproduction under way: where its copied text starts and ends in _list, and
        # the instruction's words (MENTION_MIN_CHARS), read when it begins.
        self._copied_from = 0
        self._copied_end = 0
        self._mentions: frozenset = frozenset()
        # Source tokens at which the answer has left the copied text (learned stops, above).
        self._left_at: set = set()
        self._read_for: Optional[int] = None  # the _copied_from they were read for
        self._answer_fence: Optional[int] = None  # where the answer's first code fence is

    def _forget_copy(self):
        self._cursor = None  # (source index of the next expected token, pending sub tokens)
        # (source index, output index, run, _from_answer_start) where the output left the copy
        self._divergence = None
        self._run = 0  # tokens the output has followed the current source for
        # Whether the cursor continues the copy the answer began with (through re-joins),
        # of prompt text an earlier answer does not hold; the part of its run that lies
        # before the answer.
        self._from_answer_start = False
        self._lead_run = 0

    # ---- substitutions ---------------------------------------------------------------
    def _sub_at(self, c: int):
        """The (old, new) substitution whose old tokens start at source index c, if any
        (longest first)."""
        seq = self._list
        for old, new in sorted(self._subs.get(seq[c], {}).items(), key=lambda kv: -len(kv[0])):
            if tuple(seq[c : c + len(old)]) == old:
                return old, new
        return None

    def _virtual(self, cursor, limit: int, stop: int) -> list:
        """Up to `limit` tokens of the copy from `cursor` with substitutions applied, reading
        the source only below index `stop`."""
        c, pending = cursor
        out = list(pending[:limit])
        seq = self._list
        while len(out) < limit and c < stop:
            sub = self._sub_at(c) if self._subs else None
            if sub is not None and c + len(sub[0]) <= stop:
                out.extend(sub[1][: limit - len(out)])
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
            sub = self._sub_at(c) if self._subs else None
            if sub is not None:
                old, new = sub
                if new and new[0] == t:
                    self._cursor = (c + len(old), tuple(new[1:]))
                    self._run += 1
                    return
                if t == old[0]:  # the output kept the old tokens: forget the substitution
                    del self._subs[old[0]][old]
            if seq[c] == t:
                if self._reproducing and self._from_answer_start:
                    if c == self._copied_end + FENCE_TOKENS:
                        self._read_for = None  # followed on past the end: read it again
                self._cursor = (c + 1, ())
                self._divergence = None  # following a source again
                self._run += 1
                return
        if (
            self._reproducing
            and self._from_answer_start
            and not pending
            and c < j
            and self._copied_from <= c <= self._copied_end
        ):
            self._left_at.add(seq[c])  # an edit the instruction did not name: a learned stop
        self._cursor = None
        # A divergence still waiting to re-join keeps precedence over this one: the cursor
        # that just failed may have been a stop-gap lookup taken while waiting.
        if self._divergence is None and not pending and c < j:
            self._divergence = (c, j, self._run, self._from_answer_start)
        self._from_answer_start = False
        self._run = 0

    def _resync(self, j: int) -> None:
        """After a divergence: if the output since then ends with tokens found just after the
        divergence point in the source, follow the source from there and learn the edit."""
        src, out, run, from_answer_start = self._divergence
        seq = self._list
        if j - out > self.resync_window:
            self._divergence = None
            return
        for n in (3, 2, 1):
            first = j - n + 1  # the re-joining n-gram is seq[first:j+1]
            if first < out or first == out and n == 1 and j == out:
                continue  # the divergent token itself cannot be the re-join
            gram = seq[first : j + 1]
            for p in range(src, min(src + self.resync_window, first - n + 1)):
                if seq[p : p + n] == gram:
                    old, new = tuple(seq[src:p]), tuple(seq[out:first])
                    if (
                        old
                        and old != new
                        and len(old) <= self.max_edit
                        and len(new) <= self.max_edit
                    ):
                        self._subs.setdefault(old[0], {})[old] = new
                    self._cursor = (p + n, ())
                    self._divergence = None
                    self._run = run + n  # the copy that was left goes on
                    self._from_answer_start = from_answer_start
                    return

    def _sync(self, context) -> None:
        """Brings the index to exactly ``context``: new tokens are appended (and followed by
        the copy cursor); a context that is not an extension of the last one is cut back to
        their common prefix first, as the KV cache is."""
        ctx = context.tolist() if isinstance(context, np.ndarray) else list(context)
        seq = self._list
        known = len(seq)
        common = common_prefix(ctx, seq)
        if common < known:
            self._index.truncate(common)
            del seq[common:]
            self._forget_copy()
            self._subs = {}
            self._forget_answer()  # (another answer: its start is read again below)
            known = 0  # nothing to follow: the tail is indexed like a fresh prompt
        if self._answer_start is None:
            self._answer_start = max(len(ctx) - 1, 0)
        start = len(seq)
        new_tail = ctx[start:]
        if not new_tail:
            return
        self._index.append(new_tail)
        seq.extend(new_tail)
        if self.token_text and self._answer_fence is None:
            self._answer_fence = next(
                (
                    q
                    for q in range(max(start, self._answer_start), len(seq))
                    if self._is_fence(seq[q])
                ),
                None,
            )
        if known:  # follow the new output tokens (not a fresh prompt)
            for j in range(start, len(seq)):
                if self._cursor is not None:
                    self._advance(j)
                if self._cursor is None and self._divergence is not None:
                    self._resync(j)

    # ---- candidates ----------------------------------------------------------------------
    def _match_kinds(self, origin: str, found) -> list:
        band = "long" if found.match_length >= self.COPY_RUN else "short"
        return [f"{origin}:{band}:{agreement(c, t)}" for c, t in zip(found.counts, found.totals)]

    def _candidates(self, max_tokens: int, every_length: bool = False):
        """(cursor, run, tokens, kinds, bucket) in order of preference: the copy being
        followed, the memory's match where the request's own is a token at most and the
        memory's a copy (4+ tokens), the request's own;
        with ``every_length`` also the request's shorter matches (for a grammar)."""
        seq = self._list
        if max_tokens <= 0:
            return
        if self._cursor is not None:
            out = self._virtual(self._cursor, max_tokens, len(seq))
            kind = "copy" if self._run >= self.COPY_RUN else "follow"
            yield self._cursor, self._run, out, [kind] * len(out), None
        pattern = seq[-self.max_ngram :]
        own = self._index.draft(
            pattern, max_tokens, min_match=self.min_ngram, max_occurrences=self.max_occurrences
        )
        recalled = None
        if self.memory is not None and own.match_length <= 1:
            # Searched after the request's own tokens: used where those have no match, or
            # only a one-token one, and the memory has a copy-length match. (Preferring any
            # longer memory match measured slower on code edits: the request's own file,
            # which the copy cursor then follows, lost its first rounds to the last answer.)
            self.memory_lookups += 1
            recalled = self.memory.draft(pattern, max_tokens, min_match=self.COPY_RUN)
            if not recalled.tokens:
                recalled = None
        if recalled is not None:
            self.memory_hits += 1
            yield None, 0, recalled.tokens, self._match_kinds("memory", recalled), "memory"
        if own.tokens:
            yield self._own_candidate(own, max_tokens)
        if every_length:
            for n in range(min(own.match_length, len(pattern)) - 1, self.min_ngram - 1, -1):
                shorter = self._index.draft(
                    pattern[-n:], max_tokens, min_match=n, max_occurrences=self.max_occurrences
                )
                if shorter.tokens:
                    yield self._own_candidate(shorter, max_tokens)

    def _own_candidate(self, found, max_tokens):
        cursor = (found.source, ())
        kinds = self._match_kinds("request", found)
        out = found.tokens
        if self._subs:  # the copy with the edits learned so far applied
            out = self._virtual(cursor, max_tokens, len(self._list))
            kinds = (kinds + [kinds[-1]] * len(out))[: len(out)]
        return cursor, found.match_length, out, kinds, None

    def _take(self, candidate, t0: float, n: Optional[int] = None) -> Draft:
        cursor, run, out, kinds, bucket = candidate
        if n is not None:
            out, kinds = out[:n], kinds[:n]
        following = cursor is not None and cursor is self._cursor
        if cursor is not None and not following:  # a new source: follow it from here
            self._cursor, self._run = cursor, run
            self._note_answer_copy(cursor, run)
        if (
            cursor is not None
            and not self._from_answer_start
            and self._answer_fence is not None
            and FENCED_REPRODUCTION
        ):
            self._note_fenced_copy()
        if cursor is not None and out and self._from_answer_start and self.token_text:
            if self._run - self._lead_run >= self._reproduction_run():
                self._reproducing = True
            if self._reproducing and self._read_for != self._copied_from:
                self._read_instruction()  # (again when the copy's source moved)
        if cursor is not None and self._reproducing:
            # Not past the copied text's end: the answer that reproduced it ends there too
            # (or goes on with its own words), never with the instruction after it. Cut:
            # any draft of the copied text up to FENCE_TOKENS past its end (a fence may be
            # two tokens), and the reproduction's own copy anywhere past it (re-joined there,
            # it left the copied text: into the instruction, or the answer's own words).
            # When the output itself follows the source on past the end, the end was none (a
            # fence-like token inside the text) and it is read again (_advance).
            c = self._cursor[0]
            within = self._copied_from <= c <= self._copied_end + FENCE_TOKENS
            if within or (self._from_answer_start and c > self._copied_end):
                left = self._copy_left(len(out))
                out, kinds = out[:left], kinds[:left]
        reproduced = 0
        if (
            cursor is not None
            and out
            and self._from_answer_start
            and self._reproducing
            and self._copied_from <= self._cursor[0] <= self._copied_end
        ):
            # (Believed only within the copied text: a re-join past its end, into the
            # instruction or back into the file from the answer's own words after it, is not.)
            words, left = self._mentions, self._left_at
            reproduced = next((j for j, t in enumerate(out) if t in words or t in left), len(out))
        # A copy the output has followed for a while (or a long match) passes far more often
        # than a guess from a short match, and a source followed for a token or three more
        # often than a fresh short match: the cost model keeps them apart.
        if bucket is None and out:
            if self._run >= self.COPY_RUN:
                bucket = "copy"
            else:
                bucket = "follow" if following else "guess"
        remembered = 0
        if self.memory is not None and out:
            remembered = self.memory.agreeing_run(
                self._list[-self.max_ngram :], out, self.COPY_RUN, REMEMBERED_OCCURRENCES
            )
        return Draft(
            list(out),
            None,
            time.perf_counter() - t0,
            bucket,
            token_kinds=list(kinds),
            followed=self._run if cursor is not None and out else 0,
            remembered=remembered,
            reproduced=reproduced,
        )

    def _note_answer_copy(self, cursor, run: int) -> None:
        """Whether a new source, matched for ``run`` tokens, holds the whole answer so far
        as a copy of prompt text that does not follow the answer's own lead
        (REPRODUCTION_LEAD): the start of a reproduction."""
        seq, start = self._list, self._answer_start
        answered = len(seq) - start
        self._from_answer_start = False
        if answered <= 0 or run < answered:
            return
        source = cursor[0] - answered  # where the copied text starts
        lead = REPRODUCTION_LEAD
        earlier_answer = (
            source >= lead
            and start >= lead
            and seq[source - lead : source] == seq[start - lead : start]
        )
        self._from_answer_start = not earlier_answer
        self._lead_run = run - answered
        self._copied_from = source

    def _reproduction_run(self) -> int:
        """Tokens the answer must have copied to reproduce its copied text: fewer where the
        text begins at a code fence (REPRODUCTION_RUN_FENCED)."""
        fenced = self._is_fence(self._list[self._copied_from])
        return REPRODUCTION_RUN_FENCED if fenced else REPRODUCTION_RUN

    def _note_fenced_copy(self) -> None:
        """Whether the copy being followed holds the answer's first code fence and every
        token after it, copied from the same fence in a turn that is not an earlier answer
        (FENCED_REPRODUCTION): the start of a reproduction, counted from the fence. Looked
        for while the fence is at most FENCE_LOOKBACK tokens back."""
        seq, fence = self._list, self._answer_fence
        copied = len(seq) - fence
        c, pending = self._cursor
        if pending or copied > FENCE_LOOKBACK:
            return
        source = c - copied
        if source < 0 or seq[source:c] != seq[fence:]:
            return
        if self._in_an_earlier_answer(source):
            return
        self._from_answer_start = True
        self._lead_run = max(self._run - copied, 0)
        self._copied_from = source

    def _turn_begin(self, position: int) -> int:
        """Where the turn that holds ``position`` begins: after the control token before it."""
        seq, begin = self._list, position
        while begin > 0 and self._text(seq[begin - 1]):
            begin -= 1
        return begin

    def _in_an_earlier_answer(self, position: int) -> bool:
        """Whether ``position`` lies in a turn whose header is the answer's own: the answer's
        turn from REPRODUCTION_LEAD tokens before its begin up to the answer, against as
        many from the other turn's begin (ChatML's "<|im_start|>assistant\n", Llama 3's
        "assistant<|end_header_id|>\n\n")."""
        seq, start = self._list, self._answer_start
        mine = self._turn_begin(start)
        theirs = self._turn_begin(position)
        lead, after = REPRODUCTION_LEAD, start - mine
        if mine < lead or theirs < lead:
            return False
        return seq[theirs - lead : theirs + after] == seq[mine - lead : start]

    def _text(self, token: int) -> str:
        text = self._texts.get(token)
        if text is None:
            text = self._texts[token] = self.token_text(token)
        return text

    def _is_fence(self, token: int) -> bool:
        """Whether ``token`` is (part of) a code fence: its text holds two backticks."""
        return "``" in self._text(token)

    def _read_instruction(self) -> None:
        """Where the copied text ends, and the words of the instruction around it: the rest
        of the request's turn (MENTION_MIN_CHARS)."""
        seq, source, text = self._list, self._copied_from, self._text
        turn_start = self._turn_begin(source)
        turn_end = source
        while turn_end < self._answer_start and text(seq[turn_end]):
            turn_end += 1
        # The end lies past what the answer has copied already (an answer that echoed the
        # text before the opening fence copies that fence too).
        copied = max(source + 1, self._cursor[0] if self._cursor is not None else 0)
        fence = next((q for q in range(copied, turn_end) if self._is_fence(seq[q])), turn_end)
        self._copied_end = fence
        self._read_for = source
        instruction = seq[turn_start:source] + seq[fence:turn_end]
        self._mentions = frozenset(
            t
            for t in set(instruction)
            if sum(ch.isalnum() or ch == "_" for ch in text(t)) >= MENTION_MIN_CHARS
        )

    def _copy_left(self, n: int) -> int:
        """How many of the n tokens the copy cursor drafts lie before the copied text's end
        (with the substitutions learned applied, as _virtual drafts them)."""
        return len(self._virtual(self._cursor, n, self._copied_end))

    def draft(self, context, max_tokens, params, position):
        t0 = time.perf_counter()
        self._sync(context)
        for candidate in self._candidates(max_tokens):
            if candidate[2]:
                return self._take(candidate, t0)
        return Draft([], None, time.perf_counter() - t0, None)

    def draft_constrained(self, context, max_tokens, params, position, allowed_run):
        """The candidate the grammar allows furthest (the first such in order of
        preference), cut where the grammar forbids it: when the copy being followed breaks
        the grammar (a value copied into a field whose type forbids it), an older
        occurrence of the same context may not."""
        t0 = time.perf_counter()
        self._sync(context)
        best, best_n = None, 0
        for candidate in self._candidates(max_tokens, every_length=True):
            out = candidate[2]
            n = allowed_run(out) if out else 0
            if n > best_n:
                best, best_n = candidate, n
            if out and n == len(out):
                break
        if best is None:
            return Draft([], None, time.perf_counter() - t0, None)
        return self._take(best, t0, best_n)
