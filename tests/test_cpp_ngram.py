"""The replay of llama.cpp's ngram-simple mode (pyspec.testing.cpp_ngram), on token lists:
what it drafts and how a recorded generation is priced. (Set beside pyspec's policy on the
real recordings: benchmarks/bench_peer_replay.py.)"""

import pytest

from pyspec.testing.cpp_ngram import SIZE_M, SIZE_N, ngram_simple_draft, replay_ngram_simple

TEXT = list(range(1000, 1100))  # 100 distinct tokens
FILLER = list(range(5000, 5070))  # enough history for a draft


def test_the_tokens_after_the_latest_earlier_match_of_the_last_twelve_are_drafted():
    context = FILLER + TEXT + [1] + TEXT[:SIZE_N]
    assert ngram_simple_draft(context) == TEXT[SIZE_N : SIZE_N + SIZE_M]
    # two earlier occurrences going on differently: the later one's continuation
    other = TEXT[:SIZE_N] + list(range(7000, 7060))
    context = FILLER + TEXT + [1] + other + [2] + TEXT[:SIZE_N]
    assert ngram_simple_draft(context) == other[SIZE_N : SIZE_N + SIZE_M]


def test_eleven_tokens_matched_are_not_enough():
    context = FILLER + TEXT + [1] + [2] + TEXT[1:SIZE_N]  # only the last 11 recur
    assert ngram_simple_draft(context) == []


def test_a_match_too_close_to_the_end_drafts_nothing():
    """The continuation is read up to the current position: text repeating with a period
    under 12 tokens has fewer than 12 after its latest match; a period of 13, exactly 12."""
    context = FILLER + TEXT[:11] * 3
    assert ngram_simple_draft(context) == []
    context = FILLER + TEXT[:13] * 3
    assert ngram_simple_draft(context) == TEXT[:12]


def test_a_short_context_drafts_nothing():
    context = TEXT[:30] + TEXT[:SIZE_N]  # a match, but 42 tokens of history
    assert len(context) - 1 <= SIZE_N + SIZE_M + 1
    assert ngram_simple_draft(context) == []


CHEAP = {1: 1.0, 2: 1.1, 16: 1.5, 49: 3.0, 64: 4.0}


def test_a_copy_replays_faster_than_plain_and_new_text_as_plain():
    prompt = FILLER + TEXT
    copy = replay_ngram_simple(prompt, TEXT[:90], CHEAP)
    # plain until 12 tokens of the copy are out, then drafts of 48 that all pass
    assert copy.accepted == copy.drafted > 0 and copy.speedup > 2.0
    assert copy.rounds == SIZE_N - 1 + 2
    fresh = replay_ngram_simple(prompt, list(range(9000, 9090)), CHEAP)
    assert (fresh.speedup, fresh.drafted, fresh.rounds) == (1.0, 0, 89)


def test_drafts_are_cut_to_the_tokens_asked_for():
    prompt = FILLER + TEXT
    longer = replay_ngram_simple(prompt, TEXT[:40], CHEAP, max_tokens=200)
    cut = replay_ngram_simple(prompt, TEXT[:40], CHEAP, max_tokens=40)
    assert longer.drafted == SIZE_M > longer.accepted  # past the recording: not passed
    assert cut.drafted == cut.accepted == 40 - SIZE_N - 1
    assert replay_ngram_simple(prompt, TEXT[:40], CHEAP).drafted == cut.drafted  # (None: 40)
    with pytest.raises(ValueError):
        replay_ngram_simple(prompt, [], CHEAP)
