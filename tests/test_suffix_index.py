"""The suffix index through its Python binding: drafts against a brute-force search, the
rollback (truncate) leaving exactly the shorter sequence's index, and bad input refused with
the index unchanged. (The C tests, tests/c/test_suffix_index.c, run the same comparison under
the sanitizers.)"""

import numpy as np
import pytest

from pyspec import PyspecError
from pyspec.suffix_index import MAX_MATCH, SEPARATOR, SuffixIndex


def brute_force(seq, pattern, max_match, min_match, max_occurrences, max_tokens):
    """The draft the index must give, by scanning every position."""
    seq = list(seq)
    pattern = list(pattern)[-max_match:]
    for n in range(min(len(pattern), max_match), min_match - 1, -1):
        gram = pattern[len(pattern) - n :]
        ends = [
            e
            for e in range(len(seq) - 1, n - 1, -1)
            if seq[e] != SEPARATOR and seq[e - n : e] == gram
        ][:max_occurrences]
        if ends:
            break
    else:
        return [], [], [], 0
    tokens, counts, totals = [], [], []
    for d in range(max_tokens):
        followers = [seq[e + d] for e in ends if e + d < len(seq) and seq[e + d] != SEPARATOR]
        if not followers:
            break
        best = max(dict.fromkeys(followers), key=followers.count)  # ties: the latest's
        tokens.append(best)
        counts.append(followers.count(best))
        totals.append(len(followers))
        ends = [e for e in ends if e + d < len(seq) and seq[e + d] == best]
    return tokens, counts, totals, n


def test_drafts_match_a_brute_force_search_through_appends_and_rollbacks():
    rng = np.random.default_rng(7)
    index, seq = SuffixIndex(max_match=6), []
    for step in range(400):
        if seq and rng.random() < 0.3:
            keep = int(rng.integers(0, len(seq) + 1))
            index.truncate(keep)
            del seq[keep:]
        else:
            add = [
                SEPARATOR if rng.random() < 0.03 else int(rng.integers(0, 4))
                for _ in range(int(rng.integers(0, 12)))
            ]
            index.append(add)
            seq += add
        assert len(index) == len(seq)
        tail = [t for t in seq[-10:] if t != SEPARATOR]
        for min_match in (1, 3):
            got = index.draft(tail, 8, min_match=min_match, max_occurrences=5)
            want = brute_force(seq, tail, 6, min_match, 5, 8)
            assert (got.tokens, got.counts, got.totals, got.match_length) == want, step
    assert index.tokens().tolist() == seq


def test_a_draft_never_crosses_a_separator():
    index = SuffixIndex(4)
    index.append([5, 6, 7, SEPARATOR, 5, 6])
    found = index.draft([5, 6], 4)
    assert found.tokens == [7] and found.source == 2  # not "7, then the next document"
    index.append([SEPARATOR, 6, 7, 8])
    # "6 7" before the first separator has no follower in its document: only the last counts
    found = index.draft([9, 6, 7], 3)
    assert (found.tokens, found.match_length, found.n_occurrences) == ([8], 2, 1)


def test_a_planted_majority_wins_over_the_latest_occurrence():
    # "1 2" was followed by 3 twice and by 9 once (the latest): counts say 3.
    index = SuffixIndex(2)
    index.append([1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 9, 0, 1, 2])
    found = index.draft([1, 2], 2)
    assert found.tokens == [3, 0] and found.counts == [2, 2] and found.totals == [3, 2]


@pytest.mark.parametrize(
    "call",
    [
        lambda ix: ix.append([1, -5]),
        lambda ix: ix.append(np.array([[1, 2]])),
        lambda ix: ix.append([1.5]),
        lambda ix: ix.append([2**40]),
        lambda ix: ix.truncate(99),
        lambda ix: ix.truncate(-1),
        lambda ix: ix.draft([1, SEPARATOR], 3),
        lambda ix: ix.draft([1, 2], 3, min_match=0),
        lambda ix: ix.draft([1, 2], 3, max_occurrences=10**6),
        lambda ix: ix.draft([1, 2], -1),
        lambda ix: ix.tokens(2, 50),
    ],
)
def test_bad_input_is_refused_and_the_index_is_unchanged(call):
    index = SuffixIndex(3)
    index.append([1, 2, 3, 1, 2])
    before = index.draft([1, 2], 3)
    with pytest.raises((PyspecError, ValueError)):
        call(index)
    assert len(index) == 5 and index.tokens().tolist() == [1, 2, 3, 1, 2]
    assert index.draft([1, 2], 3) == before


def test_max_match_is_bounded():
    with pytest.raises(PyspecError, match="max_match"):
        SuffixIndex(MAX_MATCH + 1)
    with pytest.raises(PyspecError, match="max_match"):
        SuffixIndex(0)
