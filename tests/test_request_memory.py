"""The memory of earlier requests: bounded (oldest out), one document per request (a chat's
next turn replaces the last), thread-safe, and searched by prompt lookup after the request's
own tokens; off where a promise about repeated requests would break."""

import threading

import numpy as np
import pytest

from pyspec.llama.drafting.lookup import PromptLookup
from pyspec.llama.drafting.request_memory import RequestMemory
from pyspec.suffix_index import SEPARATOR


def test_a_later_request_drafts_what_an_earlier_one_answered():
    memory = RequestMemory(1000)
    lookup = PromptLookup()
    lookup.use_memory(memory)
    earlier = [1, 2, 3, 40, 41, 42, 43, 44, 45]
    lookup.start_request()
    lookup.end_request(earlier)
    lookup.start_request()
    draft = lookup.draft([7, 8, 2, 3, 40, 41], 4, None, 6)  # nothing in the request itself
    assert draft.tokens == [42, 43, 44, 45] and draft.bucket == "memory"
    assert all(kind.startswith("memory:") for kind in draft.token_kinds)
    assert (lookup.memory_lookups, lookup.memory_hits) == (1, 1)
    assert memory.stats.hit_rate == 1.0


def test_the_request_itself_comes_first():
    memory = RequestMemory(1000)
    memory.add([40, 41, 50, 51])
    lookup = PromptLookup()
    lookup.use_memory(memory)
    lookup.start_request()
    # The request's own "40 41" went on with 60: as long a match as the memory's, so its own.
    assert lookup.draft([40, 41, 60, 9, 40, 41], 2, None, 6).tokens == [60, 9]
    # Where the request matches one token only, a copy-length match in the memory wins; a
    # shorter one does not.
    memory.add([4, 5, 6, 7, 70, 71])
    lookup.start_request()
    assert lookup.draft([7, 80, 4, 5, 6, 7], 2, None, 6).tokens == [70, 71]
    lookup.start_request()
    assert lookup.draft([7, 80, 9, 5, 6, 7], 2, None, 6).tokens == [80, 9]


def test_text_held_twice_and_never_continued_otherwise_is_remembered():
    memory = RequestMemory(1000)
    memory.add([1, 2, 3, 4, 5, 6, 7, 8, 9], n_prompt=0)  # all of it an answer
    before = memory.stats.lookups
    assert memory.agreeing_run([1, 2, 3, 4], [5, 6, 7], 4) == 0  # held once
    memory.add([50, 1, 2, 3, 4, 5, 6, 7, 60], n_prompt=9)  # a second goes on alike, then not
    assert memory.agreeing_run([1, 2, 3, 4], [5, 6, 7, 8, 9], 4) == 3  # 8 against 60
    assert memory.agreeing_run([1, 2, 3, 4], [5, 6, 99], 4) == 2  # the draft leaves it
    assert memory.agreeing_run([2, 3, 4], [5, 6, 7], 4) == 0  # a match shorter than asked
    assert memory.agreeing_run([1, 2, 3, 4], [], 4) == 0
    assert memory.stats.lookups == before  # not a lookup of the statistics


def test_text_held_only_in_prompts_is_not_remembered():
    # A system prompt (or a tool schema) every request sends: held twice, written by no
    # model. An output that quotes a few of its tokens is not believed to copy the rest.
    system = list(range(200, 240))
    memory = RequestMemory(1000)
    memory.add(system + [1, 2, 3, 70, 71], n_prompt=len(system) + 3)
    memory.add(system + [4, 5, 6, 80, 81], n_prompt=len(system) + 3)
    assert memory.agreeing_run(system[:8], system[8:30], 4) == 0
    # Once a model wrote it (an answer that quoted it), it is text a model reproduces.
    memory.add([9, 9] + system[:30], n_prompt=2)
    assert memory.agreeing_run(system[:8], system[8:30], 4) == 22
    # Without n_prompt nothing of a request counts as an answer.
    unknown = RequestMemory(1000)
    unknown.add(system)
    unknown.add(system)
    assert unknown.agreeing_run(system[:8], system[8:30], 4) == 0


def test_the_answers_follow_the_documents_through_turns_cuts_and_evictions():
    # Each answer is held after its prompt's last max_match tokens (here 2), so that a match
    # can run from the prompt's end into it.
    memory = RequestMemory(40, max_match=2)
    memory.add([1, 2, 3, 4, 5, 6], n_prompt=4)  # answer [5, 6]
    memory.add([1, 2, 3, 4, 5, 6, 7, 8, 9], n_prompt=7)  # the next turn: answer [8, 9]
    assert memory._answers.tokens().tolist() == [6, 7, 8, 9, SEPARATOR]
    cut = RequestMemory(40, max_match=2)
    cut.add(list(range(100, 150)), n_prompt=45)  # cut to its last 40: its answer whole
    assert cut._answers.tokens().tolist() == [143, 144, 145, 146, 147, 148, 149, SEPARATOR]
    for i in range(12):  # evictions rebuild both indexes from the documents kept
        memory.add(np.arange(10) + 1000 * i, n_prompt=i % 11)
        held = sum(d.size + 1 for d, _ in memory._documents)
        answers = sum(d.size - max(n - 2, 0) + 1 for d, n in memory._documents if d.size > n)
        assert (len(memory._index), len(memory._answers)) == (held, answers)
    assert memory.stats.evicted > 0


def test_an_answer_is_remembered_from_its_first_token():
    # The answers' first drafts match the prompt's end (a chat template's last tokens) and
    # the answer's first tokens: the answers' index must hold that end before each answer.
    template, answer = [90, 91, 92, 93], list(range(300, 330))
    memory = RequestMemory(1000)
    for user in ([1, 2], [3, 4]):
        memory.add(user + template + answer, n_prompt=len(user) + len(template))
    assert memory.agreeing_run(template + answer[:1], answer[1:21], 4) == 20


def test_a_bad_prompt_length_is_refused_and_changes_nothing():
    memory = RequestMemory(100)
    memory.add([1, 2, 3], n_prompt=2)
    for bad in (-1, 4):
        with pytest.raises(ValueError, match="n_prompt"):
            memory.add([7, 8, 9], n_prompt=bad)
    assert (len(memory), memory.stats.documents, len(memory._answers)) == (3, 1, 4)


def test_a_draft_says_how_much_of_it_earlier_requests_held_twice():
    memory = RequestMemory(1000)
    lookup = PromptLookup()
    lookup.use_memory(memory)
    text = list(range(100, 130))
    lookup.start_request()
    # A prompt and the answer that copied it.
    lookup.end_request([7] + text + [8] + text, n_prompt=len(text) + 2)
    lookup.start_request()
    draft = lookup.draft([9] + text + [8] + text[:10], 16, None, 41)  # copying it again
    assert draft.tokens == text[10:26] and draft.remembered == 16
    alone = PromptLookup()  # no memory: nothing remembered
    alone.start_request()
    assert alone.draft([9] + text + [8] + text[:10], 16, None, 41).remembered == 0


def test_the_memory_keeps_at_most_its_cap_oldest_out():
    memory = RequestMemory(100)
    for i in range(30):
        memory.add(np.arange(10) + 1000 * i)  # ten distinct tokens per request
        assert len(memory) <= 100
    assert memory.stats.evicted > 0
    assert memory.draft([29000, 29001], 3).tokens == [29002, 29003, 29004]  # the newest stays
    assert memory.draft([0, 1], 3).tokens == []  # the oldest went


def test_a_chat_turn_replaces_the_last_one_it_contains():
    memory = RequestMemory(1000)
    memory.add([1, 2, 3, 4])
    memory.add([1, 2, 3, 4, 5, 6, 7])
    assert (len(memory), memory.stats.documents) == (7, 1)
    found = memory.draft([2, 3], 4)
    assert found.tokens == [4, 5, 6, 7] and found.n_occurrences == 1  # stored once


def test_concurrent_requests_keep_the_memory_whole():
    memory = RequestMemory(5000)

    def worker(seed):
        rng = np.random.default_rng(seed)
        for _ in range(200):
            size = int(rng.integers(1, 60))
            memory.add(rng.integers(0, 50, size=size), n_prompt=int(rng.integers(0, size + 1)))
            memory.draft(rng.integers(0, 50, size=4), 8)
            memory.agreeing_run(rng.integers(0, 50, size=4), rng.integers(0, 50, size=8), 2)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(memory) <= 5000 and memory.stats.lookups == 800
    # What it holds is exactly its documents, separators between them; and their answers.
    assert len(memory._index) == len(memory) + memory.stats.documents
    answers = sum(d.size - max(n - 16, 0) + 1 for d, n in memory._documents if d.size > n)
    assert len(memory._answers) == answers


def test_bad_cap_is_refused():
    with pytest.raises(ValueError):
        RequestMemory(0)


def test_reproducible_turns_the_memory_off():
    lookup = PromptLookup()
    lookup.use_memory(RequestMemory(100))
    lookup.set_reproducible(True)
    assert lookup.memory is None


CODE = """def compute_total(items):
    total_price = 0
    for item in items:
        total_price += item.price * item.quantity
    return total_price
"""


def _chat(text):
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def test_a_real_model_drafts_from_its_earlier_answer_and_keeps_plain_greedy_text(
    qwen_path, batch_noise
):
    # The second request asks for the same edit in other words: its answer (the renamed
    # code) is in no prompt, only in the first answer, which the memory holds.
    import llama_cpp

    from pyspec.llama import SpeculativeLlama
    from pyspec.testing.near_tie import compare_texts

    kw = dict(n_ctx=1024, n_threads=2, verbose=False, seed=0)
    first = _chat(
        f"Rename total_price to grand_total and output the code only:\n```python\n{CODE}```"
    )
    second = _chat(
        f"Output this code with the variable total_price renamed to grand_total:\n"
        f"```python\n{CODE}```"
    )
    bound = batch_noise(qwen_path).tie_bound
    llm = SpeculativeLlama(qwen_path, **kw)
    plain = llama_cpp.Llama(model_path=qwen_path, **kw)
    try:
        assert llm.speculation.memory is not None  # on by default
        llm.create_completion(first, max_tokens=64, temperature=0.0)
        stored = len(llm.speculation.memory)
        assert stored > 64
        text = llm.create_completion(second, max_tokens=64, temperature=0.0)["choices"][0]["text"]
        stats = llm.speculation.last
        assert stats.memory_lookups > 0 and stats.memory_hits > 0, stats.summary()
        assert stats.memory_tokens >= stored
        reference = plain.create_completion(second, max_tokens=64, temperature=0.0)["choices"][0][
            "text"
        ]
        compare_texts(plain, plain.tokenize(second.encode(), special=True), reference, text, bound)
    finally:
        llm.close()
        plain.close()


SHOP = """import json


class Shop:
    def __init__(self, path):
        self.path = path
        self.items = {}

    def load(self):
        with open(self.path, encoding="utf-8") as source:
            self.items = json.loads(source.read())

    def save(self):
        with open(self.path, "w", encoding="utf-8") as target:
            target.write(json.dumps(self.items, sort_keys=True))

    def add(self, name, quantity):
        self.items[name] = self.items.get(name, 0) + quantity

    def remove(self, name, quantity):
        if self.items.get(name, 0) < quantity:
            raise ValueError(name)
        self.items[name] -= quantity
"""


def test_a_file_copied_again_is_drafted_long_as_remembered_and_keeps_plain_greedy_text(
    qwen_path, batch_noise
):
    # Successive edits of one file, each request carrying the file as the last left it and
    # answered with the whole file: the first request's prompt and answer hold the file
    # twice, so the second answer's copy of it is remembered (the remembered-copy rule, on
    # by default beside the lookup; what it chooses: test_adaptive).
    import llama_cpp

    from pyspec.llama import SpeculativeLlama
    from pyspec.testing.near_tie import compare_texts

    kw = dict(n_ctx=2048, n_threads=2, verbose=False, seed=0)
    edited = SHOP.replace("def remove(self, name, quantity):", "def take(self, name, quantity):")
    asks = [
        _chat(f"Here is shop.py:\n```python\n{text}```\n{instruction} Output the complete file.")
        for text, instruction in (
            (SHOP, "Rename the method remove to take."),
            (edited, "Rename the method add to put."),
        )
    ]
    bound = batch_noise(qwen_path).tie_bound
    llm = SpeculativeLlama(qwen_path, **kw)
    plain = llama_cpp.Llama(model_path=qwen_path, **kw)
    try:
        assert llm.speculation.controller.remembered_floor is not None  # on by default
        # The reproduction rule believes this copy first, from its fence line (test_reproduction);
        # off here, so that what is measured is the memory's belief.
        llm.speculation.controller.reproduced_floor = None
        llm.create_completion(asks[0], max_tokens=128, temperature=0.0)
        assert llm.speculation.last.remembered_rounds == 0  # nothing held before
        text = llm.create_completion(asks[1], max_tokens=128, temperature=0.0)["choices"][0]["text"]
        stats = llm.speculation.last
        assert stats.remembered_rounds > 0, stats.summary()
        assert "as text earlier requests held" in stats.summary()
        reference = plain.create_completion(asks[1], max_tokens=128, temperature=0.0)["choices"][0][
            "text"
        ]
        compare_texts(plain, plain.tokenize(asks[1].encode(), special=True), reference, text, bound)
    finally:
        llm.close()
        plain.close()


@pytest.mark.parametrize(
    "kwargs", [dict(memory=False), dict(adaptive=False), dict(reproducible=True), dict(memory=0)]
)
def test_the_memory_is_off_where_asked_or_where_a_promise_needs_it(gemma_path, kwargs):
    from pyspec.llama import SpeculativeLlama

    llm = SpeculativeLlama(gemma_path, n_ctx=256, n_threads=2, verbose=False, **kwargs)
    try:
        assert llm.speculation.memory is None
        llm.create_completion("one two three", max_tokens=4, temperature=0.0)
        assert llm.speculation.last.memory_lookups == 0
    finally:
        llm.close()


@pytest.mark.parametrize("memory", [-1, 1.5, "big"])
def test_a_bad_memory_setting_is_refused_before_the_model_loads(memory):
    from pyspec.llama import SpeculativeLlama

    with pytest.raises(ValueError, match="memory"):
        SpeculativeLlama("/nonexistent.gguf", memory=memory)
