"""The reproduction rule on the real model: an answer that copies back a file it was given
to edit, on the first such request, when nothing is remembered (the rule's mechanics:
test_lookup.py; what the controller chooses from it: test_adaptive.py)."""

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
    try:
        controller = llm.speculation.controller
        assert controller.reproduced_floor is None  # off unless asked for
        controller.reproduced_floor = REPRODUCED_FLOOR
        text = llm.create_completion(ask, max_tokens=96, temperature=0.0)["choices"][0]["text"]
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
