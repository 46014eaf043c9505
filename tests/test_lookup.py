"""The prompt-lookup drafter's mechanics on token sequences: n-gram lookup, the copy cursor,
and edits learned as substitutions. (Its effect on real generation is measured in
benchmarks/bench_generation.py; its exactness does not depend on it: drafts are point masses.)"""

import pytest

from pyspec.llama.drafting.lookup import (
    MENTION_MIN_CHARS,
    REPRODUCTION_LEAD,
    REPRODUCTION_RUN,
    REPRODUCTION_RUN_FENCED,
    PromptLookup,
)


def drafts_along(lookup, prompt, output, k=4):
    """Feeds the output token by token, as the loop does when every round emits one token;
    returns the draft offered before each output token."""
    seen = []
    for i in range(len(output) + 1):
        seen.append(lookup.draft(prompt + output[:i], k, None, len(prompt) + i).tokens)
    return seen


def test_lookup_proposes_what_followed_the_longest_suffix():
    lookup = PromptLookup(max_ngram=3)
    prompt = [1, 2, 3, 4, 5, 9, 9, 2, 3, 7]
    assert lookup.draft(prompt + [1, 2, 3], 2, None, 0).tokens == [4, 5]


def test_copy_cursor_keeps_following_its_source():
    # Two lines share "x =" but go on differently; once the output copies the first line, a
    # lookup of the last few tokens alone would jump to the second (the most recent) line.
    a, b = [10, 11, 12, 13, 14, 15], [20, 11, 12, 30, 31, 32]
    prompt = [1] + a + [2] + b + [3]
    lookup = PromptLookup(max_ngram=2)
    seen = drafts_along(lookup, prompt, [10, 11, 12], k=3)
    assert seen[-1] == [13, 14, 15]


def test_a_rename_is_learned_and_applied_to_later_drafts():
    old, new = [50, 51], [60]
    line1 = [1, 2, 3] + old + [4, 5, 6]
    line2 = [7, 8] + old + [9, 10, 11, 12]
    prompt = [100, 101] + line1 + [102] + line2 + [103]
    output = [1, 2, 3] + new + [4, 5, 6] + [102, 7, 8]
    lookup = PromptLookup()
    seen = drafts_along(lookup, prompt, output, k=4)
    # Before the rename is seen, the old name is drafted; after it, the new one.
    assert seen[3] == old + [4, 5]
    assert seen[len(output)] == new + [9, 10, 11]
    # The copy goes on through the substitution, token by token.
    seen_after = drafts_along(lookup, prompt, output + new, k=3)
    assert seen_after[-1] == [9, 10, 11]


def test_a_contradicted_substitution_is_forgotten():
    old, new = [50, 51], [60]
    line = [1, 2] + old + [3, 4]
    prompt = [100] + line + [101] + line + [102] + line + [103]
    output = [1, 2] + new + [3, 4, 101, 1, 2] + old + [3, 4, 102, 1, 2]
    lookup = PromptLookup()
    seen = drafts_along(lookup, prompt, output, k=3)
    assert seen[len([1, 2] + new + [3, 4, 101, 1, 2])] == new + [3, 4]  # learned
    assert seen[-1] == old + [3]  # the output kept the old name once: back to copying it


def test_a_rewritten_context_starts_over():
    lookup = PromptLookup()
    assert lookup.draft([1, 2, 3, 1, 2], 1, None, 0).tokens == [3]
    assert lookup.draft([7, 8, 9, 7], 2, None, 0).tokens == [8, 9]


def test_a_draft_says_how_long_the_output_has_followed_its_source():
    """Draft.followed: the copy cursor's run, which the sure-copy rule reads; it grows as
    the output follows the source."""
    source = list(range(100, 140))
    lookup = PromptLookup()
    context = source + [0] + source[:5]
    first = lookup.draft(context, 4, None, 0)
    assert first.tokens == source[5:9] and first.followed >= 5
    for n in range(6, 30):
        context = source + [0] + source[:n]
        d = lookup.draft(context, 4, None, 0)
        assert d.tokens == source[n : n + 4]
        assert d.followed >= n  # every token since the match was the source's
    assert d.followed > first.followed + 20
    assert lookup.draft([1, 2, 3], 4, None, 0).followed == 0  # nothing to follow


def test_followed_carries_over_an_edit_and_restarts_at_a_new_source():
    """An edit (one token changed, then the source again) keeps the run: the copy that was
    left goes on. Leaving for another source (further than an edit re-joins: the lookup's
    resync_window) restarts it at that match's length."""
    source, other, far = list(range(100, 140)), list(range(200, 240)), list(range(300, 360))
    prompt = source + [0] + far + other + [0]
    lookup = PromptLookup()
    for n in range(5, 21):  # the output follows the source token by token
        before = lookup.draft(prompt + source[:n], 4, None, 0)
    assert before.followed >= 20
    edited = prompt + source[:20] + [7] + source[21:24]  # source[20] renamed to 7
    rejoined = lookup.draft(edited, 4, None, 0)
    assert rejoined.tokens == source[24:28]
    assert rejoined.followed >= before.followed + 3  # carried over the edit
    elsewhere = lookup.draft(edited + [9] + other[:3], 4, None, 0)  # left for another text
    assert elsewhere.tokens == other[3:7]
    assert elsewhere.followed == 3  # the new match's length


@pytest.mark.parametrize(
    "kwargs",
    [dict(max_ngram=0), dict(min_ngram=3, max_ngram=2), dict(resync_window=0), dict(max_edit=0)],
)
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        PromptLookup(**kwargs)


def test_under_a_grammar_the_candidate_it_allows_furthest_is_drafted():
    # The copy being followed (and the longest suffix match) goes on with 13, say a quote
    # where the schema wants a number; the latest occurrence of the shortest suffix goes on
    # with 40, 41, 42, which the grammar allows.
    prompt = [2, 10, 11, 12, 13, 14, 15, 3, 5, 12, 40, 41, 42, 6]
    forbidden = {13}

    def allowed_run(tokens):
        return next((i for i, t in enumerate(tokens) if t in forbidden), len(tokens))

    def follower():
        lookup = PromptLookup(max_ngram=3)
        drafts_along(lookup, prompt, [10, 11], k=3)  # follows the first line
        return lookup

    assert follower().draft(prompt + [10, 11, 12], 3, None, 0).tokens == [13, 14, 15]
    lookup = follower()
    assert lookup.draft_constrained(prompt + [10, 11, 12], 3, None, 0, allowed_run).tokens == [
        40,
        41,
        42,
    ]
    # The output then follows that candidate: the next draft continues it.
    assert lookup.draft_constrained(prompt + [10, 11, 12, 40], 3, None, 0, allowed_run).tokens == [
        41,
        42,
        6,
    ]
    # A candidate allowed in part is cut where the grammar forbids it.
    forbidden.update({41})
    assert follower().draft_constrained(prompt + [10, 11, 12], 3, None, 0, allowed_run).tokens == [
        40
    ]
    # Nothing allowed anywhere: no draft (the loop then decodes plainly).
    assert follower().draft_constrained(prompt + [10, 11, 12], 3, None, 0, lambda t: 0).tokens == []


LEAD = [90, 91]  # what precedes the answer (a chat template's assistant header)
FILE = list(range(100, 160))
SPECIAL = {0, 3, 4}  # a chat template's turn markers: their text is empty
FENCE = 9  # a code fence's text
FUNCTION_WORD = 10  # too short to name anything ("of")


def text_of(token: int) -> str:
    """A vocabulary for the token ids here."""
    if token in SPECIAL:
        return ""
    if token == FENCE:
        return "```"
    return "of" if token == FUNCTION_WORD else f"word{token}"


def reader(**kwargs) -> PromptLookup:
    return PromptLookup(token_text=text_of, **kwargs)


def reproduced_along(lookup, prompt, answer, k=16):
    """Draft.reproduced before each answer token from the first on, the request started
    as the loop starts it (its first draft's context: the prompt and one token)."""
    lookup.start_request()
    return [lookup.draft(prompt + answer[:n], k, None, 0) for n in range(1, len(answer) + 1)]


def test_an_answer_that_copies_its_prompt_from_its_first_token_reproduces_it():
    """From REPRODUCTION_RUN tokens copied from the answer's first token on, the drafts that
    continue the copy are marked reproduced, whole; before that, none."""
    prompt = [1, 2, 5] + FILE + [6, 7] + LEAD  # the file, in the user's message
    lookup = reader()
    for n, d in enumerate(reproduced_along(lookup, prompt, FILE[:30]), start=1):
        assert d.tokens == FILE[n : n + 16]
        assert d.reproduced == (len(d.tokens) if n >= REPRODUCTION_RUN else 0), n
    assert lookup.reproducing
    # an edit, then the file again: the copy goes on, still reproduced
    edited = FILE[:30] + [7] + FILE[31:34]
    rejoined = lookup.draft(prompt + edited, 16, None, 0)
    assert rejoined.tokens == FILE[34:50] and rejoined.reproduced == 16
    # the next request starts over
    later = reproduced_along(lookup, prompt, [8, 9] + FILE[:20])
    assert not lookup.reproducing and all(d.reproduced == 0 for d in later)


def test_a_copy_that_begins_at_a_code_fence_reproduces_from_fewer_tokens():
    """An answer that copies the prompt's fenced block from its first token (an edit's
    answer: the fence, the language, the newline) reproduces it from REPRODUCTION_RUN_FENCED
    tokens copied; a copy of the same block without its fence waits for REPRODUCTION_RUN."""
    assert REPRODUCTION_RUN_FENCED < REPRODUCTION_RUN
    block = [FENCE] + FILE
    prompt = [0, 1, 2] + block + [FENCE, 5, 3, 0] + LEAD
    for answer, needed in ((block[:20], REPRODUCTION_RUN_FENCED), (FILE[:20], REPRODUCTION_RUN)):
        lookup = reader()
        drafts = reproduced_along(lookup, prompt, answer)
        marked = [n for n, d in enumerate(drafts, start=1) if d.reproduced]
        assert marked[0] == needed, answer[0]
        assert marked == list(range(needed, len(answer) + 1))
        assert drafts[-1].reproduced == len(drafts[-1].tokens) == 16


def test_an_answer_that_opens_the_same_fence_and_writes_its_own_code_is_no_reproduction():
    """The fence line alone (fence, language, newline) is not enough: an answer that opens
    the prompt's fence and goes on with code of its own (tests for the file) must not have
    the file believed (why REPRODUCTION_RUN_FENCED counts a token of the code too)."""
    lang, newline = 11, 12
    block = [FENCE, lang, newline] + FILE
    prompt = [0, 1, 2] + block + [FENCE, 5, 3, 0] + LEAD
    assert REPRODUCTION_RUN_FENCED > 3
    lookup = reader()
    drafts = reproduced_along(lookup, prompt, [FENCE, lang, newline] + list(range(200, 220)))
    assert drafts[2].tokens[:4] == FILE[:4]  # the file is drafted after the fence line...
    assert not lookup.reproducing and all(d.reproduced == 0 for d in drafts)  # ...not believed


def test_an_answer_that_starts_as_an_earlier_answer_did_is_not_a_reproduction():
    """Text that follows the same tokens as the answer (LEAD) is an earlier answer: copying
    it is a regeneration, not a reproduction, however long the copy."""
    prompt = [1, 2, 5] + LEAD + FILE + [6, 7] + LEAD
    lookup = reader()
    drafts = reproduced_along(lookup, prompt, FILE[:30])
    assert drafts[-1].tokens == FILE[30:46]  # the copy is drafted all the same
    assert not lookup.reproducing and all(d.reproduced == 0 for d in drafts)
    assert REPRODUCTION_LEAD == len(LEAD)


def test_a_copy_that_starts_after_the_answers_first_token_is_not_a_reproduction():
    prompt = [1, 2, 5] + FILE + [6, 7] + LEAD
    lookup = reader()
    drafts = reproduced_along(lookup, prompt, [8] + FILE[:30])
    assert drafts[-1].tokens == FILE[30:46] and drafts[-1].followed >= 30
    assert all(d.reproduced == 0 for d in drafts)


def test_a_reproduction_is_believed_up_to_the_instructions_next_word():
    """A word of the request's instruction (its turn outside the copied text) stops the
    reproduced run where it comes back in the file: that is where an edit is asked for.
    Words of other turns (the system prompt) and short ones do not; nor does the copied
    text itself."""
    file = FILE[:20] + [FUNCTION_WORD] + FILE[20:40] + [7] + FILE[40:]
    system = [0, 11, 12, 3]  # a system turn, its words 11 and 12 (not the instruction)
    file[30] = 11
    instruction = [1, 2, 7, FUNCTION_WORD]  # "rename 7 ... of": 7 is named
    prompt = system + [0] + instruction + [FENCE] + file + [FENCE] + [3, 0] + LEAD
    lookup = reader()
    drafts = reproduced_along(lookup, prompt, [FENCE] + file[:12], k=48)
    assert lookup.reproducing
    last = drafts[-1]
    assert last.tokens == file[12:60]
    # believed through the function word (20) and the system prompt's word (30), up to 7
    assert last.reproduced == file.index(7) - 12
    assert MENTION_MIN_CHARS > len("of")


def test_where_a_reproduction_was_left_stops_its_later_drafts():
    """An edit the instruction's words do not tell (a token inserted before a word of the
    file, as type hints go in before every `)` of a `def` line): the source token where the
    answer left the copy stops the reproduced run where it comes back. Without the edit the
    same draft is believed whole; the next request starts without the stop."""
    again = 150  # a word of the file that comes twice
    file = [t for t in FILE if t != again]
    file = file[:10] + [again] + file[10:30] + [again] + file[30:]
    prompt = [0, 1, 2, FENCE] + file + [FENCE, 5, 3, 0] + LEAD
    inserted = 13
    lookup = reader()
    left = reproduced_along(lookup, prompt, [FENCE] + file[:10] + [inserted] + file[10:20], k=32)
    assert lookup.reproducing
    assert left[-1].tokens == file[20:52]
    assert left[-1].reproduced == left[-1].tokens.index(again) == 11
    kept = reproduced_along(lookup, prompt, [FENCE] + file[:20], k=32)  # the next request
    assert kept[-1].tokens == file[20:52] and kept[-1].reproduced == 32


def test_a_reproduction_is_not_drafted_past_the_copied_texts_end():
    """The copied text ends at the code fence after it: the answer that reproduced it ends
    there as well, never with the instruction that follows it in the prompt."""
    after = [1, 2, 5, 6]  # the instruction, after the file
    prompt = [0, FENCE] + FILE + [FENCE] + after + [3, 0] + LEAD
    lookup = reader()
    answer = [FENCE] + FILE[:50]
    drafts = reproduced_along(lookup, prompt, answer, k=32)
    assert drafts[-1].tokens == FILE[50:] and drafts[-1].reproduced == len(FILE) - 50
    # at the end of the file, nothing is left to draft from it
    done = lookup.draft(prompt + [FENCE] + FILE, 32, None, 0)
    assert done.tokens == []
    closed = lookup.draft(prompt + [FENCE] + FILE + [FENCE], 32, None, 0)  # the fence too
    assert closed.tokens == []
    # without a vocabulary the drafter cannot read the instruction: no reproduction, and
    # the copy goes on through the fence
    blind = PromptLookup()
    drafts = reproduced_along(blind, prompt, answer, k=32)
    assert not blind.reproducing and drafts[-1].reproduced == 0
    assert drafts[-1].tokens[:11] == FILE[50:] + [FENCE]


def test_an_answer_that_begins_with_words_then_copies_a_fenced_file_reproduces_it():
    """An answer that says "Here is the code:", then copies the prompt's fenced file from
    its opening fence: the copy counts from the answer's fence (FENCED_REPRODUCTION). The
    same block copied from an earlier answer (a turn that begins with the answer's own
    lead) does not."""
    user = [0, 80, 81]  # a turn marker, then the user turn's header
    prompt = user + [1, 2, FENCE] + FILE + [FENCE, 5, 3] + [0] + LEAD
    answer = [20, 21, 22, FENCE] + FILE[:20]
    lookup = reader()
    drafts = reproduced_along(lookup, prompt, answer)
    assert lookup.reproducing
    from_fence = [d.reproduced for d in drafts[3:]]  # the drafts after 1, 2, ... copied
    fenced = REPRODUCTION_RUN_FENCED
    assert from_fence[: fenced - 1] == [0] * (fenced - 1)
    assert from_fence[fenced - 1] == 16
    assert drafts[-1].tokens == FILE[20:36] and drafts[-1].reproduced == 16
    earlier = [0] + LEAD + [20, FENCE] + FILE + [FENCE, 3]  # the block, in an earlier answer
    prompt = user + [1, 2, 3] + earlier + user + [7, 3] + [0] + LEAD
    lookup = reader()
    drafts = reproduced_along(lookup, prompt, [22, FENCE] + FILE[:30])
    assert drafts[-1].tokens == FILE[30:46]  # drafted all the same
    assert not lookup.reproducing and all(d.reproduced == 0 for d in drafts)


def test_a_fenced_block_of_an_earlier_answer_is_told_by_the_turns_header():
    """Llama 3's turns: a header of a role word, a control token and "\\n\\n" before each
    turn's text. The block copied from the earlier assistant turn is not a reproduction;
    the same block in the user's turn is."""

    def turn(role, body):
        return [4, role, 3, 91] + body + [0]  # start header, role, end header, "\n\n"

    block = [FENCE] + FILE + [FENCE]
    answer = [22, FENCE] + FILE[:30]
    earlier = turn(80, [1, 2]) + turn(90, [20] + block) + turn(80, [7, 2]) + [4, 90, 3, 91]
    lookup = reader()
    drafts = reproduced_along(lookup, earlier, answer)
    assert drafts[-1].tokens == FILE[30:46] and not lookup.reproducing
    given = turn(80, [1, 2] + block) + [4, 90, 3, 91]
    lookup = reader()
    drafts = reproduced_along(lookup, given, answer)
    assert lookup.reproducing and drafts[-1].reproduced == 16


def test_a_fence_inside_the_copied_text_does_not_end_the_drafts():
    """A token that reads as a fence inside the file (an RST ``literal``) is taken for the
    copied text's end: drafts stop there; once the answer has copied on past it, the end is
    read again and the drafts run on, believed (a cautious end, not a lock)."""
    file = FILE[:20] + [FENCE] + FILE[20:]
    prompt = [0, 80, 81, 1, 2, FENCE] + file + [FENCE, 5, 3] + [0] + LEAD
    lookup = reader()
    drafts = reproduced_along(lookup, prompt, [FENCE] + file[:32], k=16)
    assert lookup.reproducing
    assert drafts[10].tokens == file[10:20] and drafts[10].reproduced == 10  # up to the end
    assert drafts[-1].tokens == file[32:48] and drafts[-1].reproduced == 16
