"""Structured output: speculative decoding against plain llama-cpp-python with the same grammar.

Two prompts per model: a JSON extraction that copies fields from the prompt (what prompt
lookup drafts well) and free JSON (nothing to copy). Plain and speculative alternate in one
run, greedy, generation tokens/s after the first token. Also reported: what the grammar
costs per verify row in pyspec (the walk down the row, ``constrained_rows.kept_tokens``)
against one whole-vocabulary grammar pass, which is what llama-cpp-python's chain pays for
every token it samples under a grammar.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import llama_cpp
import numpy as np
import pytest

from pyspec.llama import SpeculativeLlama
from pyspec.llama.constraints.grammar import GrammarState
from pyspec.testing.models import ensure_model

PERSONS = "\n".join(
    [
        "Name: Maria Lopez; Email: maria.lopez@example.com; City: Valencia; Phone: +34 612 345 678",
        "Name: John Smith; Email: john.smith@example.org; City: Leeds; Phone: +44 7700 900123",
        "Name: Aiko Tanaka; Email: aiko.tanaka@example.jp; City: Osaka; Phone: +81 90 1234 5678",
        "Name: Lars Berg; Email: lars.berg@example.se; City: Uppsala; Phone: +46 70 123 45 67",
    ]
)
FIELDS = ("name", "email", "city", "phone")  # every one a required string
PERSON = {
    "type": "object",
    "properties": {field: {"type": "string"} for field in FIELDS},
    "required": list(FIELDS),
}
# An object around the array: with a bare array schema Gemma 270M answers "[ ]".
SCHEMA = {
    "type": "object",
    "properties": {"people": {"type": "array", "items": PERSON}},
    "required": ["people"],
}
EXTRACT = f"Extract every person below as a JSON array of objects.\n{PERSONS}"
FREE = "Describe a fictional library with three books as one JSON object."
TEMPLATES = {
    "qwen": "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n",
    "gemma": "<start_of_turn>user\n{}<end_of_turn>\n<start_of_turn>model\n",
}
MODELS = {"qwen": "qwen2.5-coder-1.5b", "gemma": "gemma3-270m"}
KW = dict(n_ctx=2048, n_threads=2, verbose=False, seed=7)


@dataclass(frozen=True)
class Case:
    model: str
    prompt: str  # "extract" (schema) or "free" (JSON mode)
    max_tokens: int

    @property
    def id(self):
        return f"{self.model}-{self.prompt}"

    def grammar(self):
        if self.prompt == "extract":
            return llama_cpp.LlamaGrammar.from_json_schema(json.dumps(SCHEMA), verbose=False)
        return llama_cpp.LlamaGrammar.from_string(llama_cpp.llama_grammar.JSON_GBNF, verbose=False)


CASES = [
    Case("qwen", "extract", 200),
    Case("qwen", "free", 120),
    Case("gemma", "extract", 200),
    Case("gemma", "free", 120),
]


def _generation_speed(llm, prompt_tokens, case):
    """(tokens, seconds, token ids) of greedy generation after the first token."""
    llm.reset()
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n, start, out = 0, None, []
    gen = llm.generate(prompt_tokens, temp=0.0, grammar=case.grammar())
    for tok in gen:
        if start is None:  # the first token comes from the prompt's logits: start timing here
            start = time.perf_counter()
        if llama_cpp.llama_vocab_is_eog(vocab, tok) or n >= case.max_tokens:
            break
        n += 1
        out.append(int(tok))
    gen.close()
    return n - 1, time.perf_counter() - start, out


def _whole_vocabulary_pass_seconds(llm, case) -> float:
    """One grammar check of every token, from the grammar's start state (what plain pays
    per sampled token, at least: its chain checks the whole row)."""
    state = GrammarState.parse(llm, case.grammar())
    ids = np.arange(llm.n_vocab())
    state.allowed(ids)
    start = time.perf_counter()
    for _ in range(3):
        state.allowed(ids)
    state.close()
    return (time.perf_counter() - start) / 3


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def bench_grammar_generation(benchmark, case, generation_rows):
    path = str(ensure_model(MODELS[case.model]))
    plain = llama_cpp.Llama(model_path=path, **KW)
    spec = SpeculativeLlama(path, draft="lookup", **KW)
    prompt = plain.tokenize(
        TEMPLATES[case.model].format(EXTRACT if case.prompt == "extract" else FREE).encode(),
        special=True,
    )
    runs = {"plain": [], "spec": []}
    texts = {}

    def one_round():
        for kind, llm in (("plain", plain), ("spec", spec)):
            n, seconds, tokens = _generation_speed(llm, prompt, case)
            runs[kind].append((n, seconds))
            texts[kind] = tokens

    _generation_speed(spec, prompt, case)  # warm-up: the controller learns the costs
    spec.speculation.total = type(spec.speculation.total)()
    benchmark.pedantic(one_round, rounds=2, iterations=1)
    rate = {k: sum(n for n, _ in v) / sum(s for _, s in v) for k, v in runs.items()}
    stats = spec.speculation.total
    per_row_us = stats.grammar_seconds / max(stats.grammar_rows, 1) * 1e6
    whole_us = _whole_vocabulary_pass_seconds(plain, case) * 1e6
    ratio = rate["spec"] / rate["plain"]
    benchmark.extra_info.update(
        plain_tok_s=rate["plain"],
        spec_tok_s=rate["spec"],
        ratio=ratio,
        acceptance=stats.acceptance_rate,
        effective_k=stats.effective_k,
        verify_steps=stats.verify_steps,
        plain_steps=stats.plain_steps,
        grammar_us_per_row=per_row_us,
        whole_vocab_pass_us=whole_us,
        drafts_forbidden=stats.grammar_cut,
        same_text=texts["plain"] == texts["spec"],
    )
    generation_rows.append(
        f"grammar {case.id:14s} plain {rate['plain']:6.2f} tok/s  spec {rate['spec']:6.2f} tok/s  "
        f"x{ratio:4.2f}  accept {100 * stats.acceptance_rate:5.1f}%  k {stats.effective_k:4.2f}  "
        f"grammar {per_row_us:6.0f} us/row (whole-vocabulary pass {whole_us / 1e3:6.1f} ms)  "
        f"forbidden drafts {stats.grammar_cut}  same text {texts['plain'] == texts['spec']}"
    )
    spec.close()
    plain.close()
