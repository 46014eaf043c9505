"""The reproduction rule on the real model: an answer that copies back a file it was given
to edit, on the first such request, when nothing is remembered, and where the words of
`pyspec demo`'s rename stop it (the rule's mechanics: test_lookup.py; what the controller
chooses from it: test_adaptive.py)."""

QUEUE = '''"""A bounded queue of jobs."""
from collections import deque


class JobQueue:
    def __init__(self, limit):
        self.limit = limit
        self.jobs = deque()

    def push(self, job):
        if len(self.jobs) >= self.limit:
            raise OverflowError("queue full")
        self.jobs.append(job)

    def pop(self):
        if not self.jobs:
            raise IndexError("queue empty")
        return self.jobs.popleft()

    def __len__(self):
        return len(self.jobs)
'''


def _chat(text):
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def test_a_file_given_to_edit_is_reproduced_and_keeps_plain_greedy_text(qwen_path, batch_noise):
    import llama_cpp

    from pyspec.llama import SpeculativeLlama
    from pyspec.llama.drafting.adaptive import REPRODUCED_FLOOR
    from pyspec.testing.near_tie import compare_texts

    kw = dict(n_ctx=2048, n_threads=2, verbose=False, seed=0)
    ask = _chat(
        f"Here is jobs.py:\n```python\n{QUEUE}```\nRename the method pop to take. "
        "Output the complete updated file only."
    )
    bound = batch_noise(qwen_path).tie_bound
    llm = SpeculativeLlama(qwen_path, **kw)
    plain = llama_cpp.Llama(model_path=qwen_path, **kw)
    controller = llm.speculation.controller
    choose_free, asked = controller.choose_free, []

    def told_the_end(draft, confidence=None, remaining=None):
        asked.append((len(draft.tokens), remaining))
        return choose_free(draft, confidence, remaining=remaining)

    controller.choose_free = told_the_end
    try:
        assert controller.reproduced_floor == REPRODUCED_FLOOR  # on by default
        assert controller.finish_plan  # on by default
        text = llm.create_completion(ask, max_tokens=96, temperature=0.0)["choices"][0]["text"]
        # Each round tells the controller what the request may still emit (its last token
        # from the last pass: no draft reaches it), counting down from 95 (the first token
        # came from the prompt's pass): what the finish plan reads.
        assert asked and asked[0][1] == 95, asked[:3]
        assert all(a[1] > b[1] for a, b in zip(asked, asked[1:])), asked
        assert all(n <= remaining - 1 for n, remaining in asked), asked
        stats = llm.speculation.last
        assert stats.remembered_rounds == 0  # nothing held: the first request
        assert stats.reproduced_rounds > 0, stats.summary()
        assert "prompt text the answer reproduces" in stats.summary()
        reference = plain.create_completion(ask, max_tokens=96, temperature=0.0)["choices"][0][
            "text"
        ]
        compare_texts(plain, plain.tokenize(ask.encode(), special=True), reference, text, bound)
    finally:
        llm.close()
        plain.close()


def test_the_demos_rename_stops_each_reproduced_run_at_an_edit(qwen_path):
    """On `pyspec demo`'s prompt (rename `total_price` in a short function), the drafts
    along plain greedy's answer, read with the model's vocabulary: the answer reproduces the
    code, each run marked reproduced ends at most one token past where the answer leaves the
    copy (the instruction names the renamed variable, and its tokens stop the run), and no
    draft goes past the code's closing fence. Without the stops, the first run believed 63
    tokens and the rename was its 9th."""
    import llama_cpp

    from pyspec.llama.drafting.factory import target_text
    from pyspec.llama.drafting.lookup import PromptLookup
    from pyspec.testing.replay import passing
    from pyspec.tools.cli import DEMO_PROMPT

    plain = llama_cpp.Llama(model_path=qwen_path, n_ctx=2048, n_threads=2, verbose=False)
    try:
        prompt = plain.tokenize(DEMO_PROMPT.encode(), special=True)
        answer = []
        for token in plain.generate(prompt, temp=0.0):
            if token == plain.token_eos() or len(answer) == 128:
                break
            answer.append(int(token))
        assert "grand_total" in plain.detokenize(answer).decode()
        lookup = PromptLookup(token_text=target_text(plain))
        lookup.start_request()
        reproduced = 0
        end_of_turn = prompt[-5]  # after the closing fence: <|im_end|>, then the template
        for i in range(1, len(answer)):
            draft = lookup.draft(prompt + answer[:i], 63, None, len(prompt) + i)
            if not draft.reproduced:
                continue
            reproduced += 1
            passed = passing(draft.tokens[: draft.reproduced], answer, i)
            assert passed >= draft.reproduced - 1, (i, draft)
            assert end_of_turn not in draft.tokens, i  # the copy ends with the code
        assert lookup.reproducing and reproduced > 0
    finally:
        plain.close()


def test_the_targets_vocabulary_reads_long_pieces_and_refuses_once_closed(qwen_path):
    """make_drafter's token text: control tokens read as empty, a piece longer than
    llama-cpp-python's 32-byte detokenize buffer whole, and a closed target raises instead
    of reading its freed vocabulary."""
    import llama_cpp
    import pytest

    from pyspec.errors import PyspecRuntimeError
    from pyspec.llama.drafting.factory import target_text

    llm = llama_cpp.Llama(model_path=qwen_path, vocab_only=True, verbose=False)
    text = target_text(llm)
    token = 89180  # in Qwen2.5's vocabulary, 114 bytes; llama-cpp-python's detokenize: b""
    assert text(token) == "//" + "-" * 112
    im_end = llm.tokenize(b"<|im_end|>", add_bos=False, special=True)
    assert [text(t) for t in im_end] == [""]
    assert text(llm.tokenize(b" total", add_bos=False)[0]) == " total"
    llm.close()
    with pytest.raises(PyspecRuntimeError):
        text(token)
