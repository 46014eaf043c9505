"""Grammars and logits processors under speculation: exact on real logits, equal to plain
llama-cpp-python on real models.

The statistical tests sample rows masked by pyspec's walk (``kept_tokens``) and compare with
llama.cpp's chain applied to the row masked by the grammar over the whole vocabulary; the
planted bugs (masking after top-k, the two-draw shortcut with truncation, cutting a forbidden
draft that has a probability) must fail the same test.
"""

import dataclasses
import json
import logging

import llama_cpp
import numpy as np
import pytest
from reference import chisquare_pvalue, reference_distribution

import pyspec
from pyspec.llama import SpeculativeLlama
from pyspec.llama.constraints.grammar import GrammarState
from pyspec.llama.constraints.rows import RowConstraints, kept_tokens
from pyspec.llama.drafting.draft_model import draw_from
from pyspec.llama.loop import Speculation
from pyspec.rng import Purpose, uniform
from pyspec.testing.near_tie import compare_texts, one_token_gap

pytestmark = pytest.mark.model

WORDS = 'root ::= " "? [a-z]+'  # lower-case words: " Apple", ":" and "\n" are forbidden
DIGITS = 'root ::= [0-9]+ "."'
N_SAMPLES = 20000
ALPHA = 1e-4  # the correct scheme must pass at this level ...
BIAS_P = 1e-9  # ... and every planted bug must fail far below it


@pytest.fixture(scope="module")
def gemma(gemma_path):
    llm = llama_cpp.Llama(
        model_path=gemma_path, n_ctx=512, n_batch=512, logits_all=True, verbose=False, n_threads=2
    )
    yield llm
    llm.close()


def _row(llm, prompt: str) -> np.ndarray:
    llm.reset()
    tokens = llm.tokenize(prompt.encode())
    llm.eval(tokens)
    return np.array(llm.scores[len(tokens) - 1], dtype=np.float32)


def _state(llm, grammar: str, prefix: str = "") -> GrammarState:
    state = GrammarState.parse(llm, llama_cpp.LlamaGrammar.from_string(grammar, verbose=False))
    for t in llm.tokenize(prefix.encode(), add_bos=False) if prefix else []:
        state.accept(t)
    return state


def _full_mask(state: GrammarState, row: np.ndarray) -> np.ndarray:
    allowed = state.allowed(np.arange(row.size))
    return np.where(allowed, row, -np.inf).astype(np.float32)


def _masked(row, ids) -> np.ndarray:
    out = np.full(row.size, -np.inf, dtype=np.float32)
    out[ids] = row[ids]
    return out


def _samples(row, params, n=N_SAMPLES, first=0):
    return np.array([pyspec.sample(row, params, position=first + i) for i in range(n)])


CASES = [  # prompt, grammar, grammar prefix already generated
    pytest.param("My favourite fruit is", WORDS, "", id="words"),
    pytest.param("The year the war ended was", DIGITS, "", id="digits"),
    pytest.param(
        'Give JSON for the person Maria Lopez: {"name": "Mar',
        llama_cpp.llama_grammar.JSON_GBNF,
        '{"name": "Mar',
        id="json-in-string",
    ),
    pytest.param(
        "Give JSON for the person Maria Lopez:",
        llama_cpp.llama_grammar.JSON_GBNF,
        "",
        id="json-start",
    ),
]


@pytest.mark.parametrize("prompt, grammar, prefix", CASES)
@pytest.mark.parametrize("m", [1, 40, 300])
def test_kept_tokens_hold_the_m_best_allowed_and_nothing_forbidden(
    gemma, prompt, grammar, prefix, m
):
    row = _row(gemma, prompt)
    state = _state(gemma, grammar, prefix)
    allowed = np.flatnonzero(state.allowed(np.arange(row.size)))
    rng = np.random.default_rng(m)
    window = rng.choice(row.size, 20, replace=False)  # penalised tokens: always checked
    kept = kept_tokens(state, row, m, window)
    assert set(kept) <= set(allowed)
    order = allowed[np.argsort(-row[allowed], kind="stable")]
    if order.size > m:  # every allowed token at least as high as the m-th best must be kept
        best = order[row[order] >= row[order[m - 1]]]
    else:
        best = order
    assert set(best) <= set(kept)
    assert set(window) & set(allowed) <= set(kept)
    if m < 300:
        assert kept.size < row.size // 10  # the walk stopped early: no whole-vocabulary pass
    state.close()


@pytest.mark.parametrize(
    "prompt, grammar, prefix",
    CASES
    + [  # only EOG and spaces left:
        pytest.param(
            'Give JSON: {"a": 1}', llama_cpp.llama_grammar.JSON_GBNF, '{"a": 1}', id="json-done"
        )
    ],
)
@pytest.mark.parametrize(
    "params",
    [
        pyspec.SamplingParams(temperature=0.0),
        pyspec.SamplingParams(temperature=0.8),
        pyspec.SamplingParams(temperature=0.8, top_k=40, top_p=0.9, min_p=0.0),
        pyspec.SamplingParams(temperature=0.8, top_k=40, top_p=1.0, min_p=0.1),
        pyspec.SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),
    ],
    ids=["greedy", "defaults", "top_p", "min_p", "raw"],
)
def test_rows_masked_by_the_walk_have_the_whole_mask_distribution(
    gemma, prompt, grammar, prefix, params
):
    """The walk (with its min-p and top-p stops) forbids more than the grammar, never what
    the chain would keep: the distribution over the row is the whole-vocabulary mask's."""
    row = _row(gemma, prompt)
    state = _state(gemma, grammar, prefix)
    constraints = RowConstraints(params, row.size, state)
    walked = constraints.rows(row[None], [], [], [state], None, 0)[0]
    want = pyspec.distribution(_full_mask(state, row), params)
    np.testing.assert_allclose(pyspec.distribution(walked, params), want, atol=1e-6)
    constraints.close()


PARAMS = [
    pyspec.SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=11),
    pyspec.SamplingParams(temperature=1.5, top_k=40, top_p=1.0, min_p=0.0, seed=12),
]


@pytest.mark.parametrize("params", PARAMS, ids=["defaults", "wide"])
def test_masked_rows_sample_the_constrained_distribution(gemma, params):
    row = _row(gemma, "My favourite fruit is")
    state = _state(gemma, WORDS)
    want = reference_distribution(_full_mask(state, row), params)
    got = _samples(_masked(row, kept_tokens(state, row, params.top_k)), params)
    assert chisquare_pvalue(got, want) > ALPHA
    state.close()


def test_planted_mask_after_top_k_fails(gemma):
    params = PARAMS[1]
    row = _row(gemma, "My favourite fruit is")
    state = _state(gemma, WORDS)
    want = reference_distribution(_full_mask(state, row), params)
    raw_top = np.argsort(-row, kind="stable")[: params.top_k]
    bug = raw_top[state.allowed(raw_top)]  # top-k of the raw row, then the grammar
    assert 0 < bug.size < params.top_k
    assert chisquare_pvalue(_samples(_masked(row, bug), params), want) < BIAS_P
    state.close()


def test_planted_two_draw_shortcut_with_top_k_fails(gemma):
    """Draw from the raw row and keep the token when allowed, else draw from the masked
    row: exact with temperature alone, biased once top-k truncates the raw row."""
    params = PARAMS[1]
    row = _row(gemma, "My favourite fruit is")
    state = _state(gemma, WORDS)
    masked = _full_mask(state, row)
    want = reference_distribution(masked, params)
    first = _samples(row, params)
    redraw = _samples(masked, dataclasses.replace(params, seed=99))
    got = np.where(state.allowed(first), first, redraw)
    assert chisquare_pvalue(got, want) < BIAS_P
    state.close()


def _first_tokens_with_probable_forbidden_draft(gemma, cut_forbidden: bool):
    """The token emitted at row 0 when the draft comes from q = (a forbidden token 0.5, the
    best allowed token 0.5), verified by rejection sampling against the masked rows."""
    params = PARAMS[0]
    row0 = _row(gemma, "My favourite fruit is")
    state = _state(gemma, WORDS)
    forbidden = int(np.argmax(np.where(state.allowed(np.arange(row0.size)), -np.inf, row0)))
    best_allowed = int(np.argmax(_full_mask(state, row0)))
    q = pyspec.SparseDraftProbs(
        np.array([[forbidden, best_allowed]], dtype=np.int32),
        np.array([[0.5, 0.5]], dtype=np.float32),
    )
    constraints = RowConstraints(params, row0.size, state)
    raw = np.stack([row0, row0])  # row 1 is read only after an accepted draft; its value is moot
    out = []
    for i in range(N_SAMPLES // 2):
        d = int(draw_from(q.tokens[0], q.probs[0], uniform(params.seed, i, Purpose.DRAFT)))
        drafts, states, is_forbidden = Speculation._follow_grammar(constraints, [d], q)
        if cut_forbidden and is_forbidden:  # the planted bug: drop it like a point-mass draft
            drafts, is_forbidden = [], False
        n_rows = 1 + len(drafts) - is_forbidden
        rows = constraints.rows(raw[:n_rows], [], drafts, states, None, i)
        if is_forbidden:
            rows = np.concatenate([rows, rows[-1:]])
        probs = q if drafts else None
        result = pyspec.verify(rows, drafts, probs, params=params, position=i)
        out.append(int(result.tokens[0]))
        constraints.discard(states)
    want = reference_distribution(_full_mask(state, row0), params)
    constraints.close()
    return np.array(out), want, best_allowed


def test_forbidden_draft_with_probabilities_is_rejected_not_cut(gemma):
    got, want, best = _first_tokens_with_probable_forbidden_draft(gemma, cut_forbidden=False)
    assert 0.1 < want[best] < 0.9  # a cut would emit it with 0.5 + 0.5 * want[best]
    assert chisquare_pvalue(got, want) > ALPHA


def test_planted_cut_of_a_forbidden_draft_with_probabilities_fails(gemma):
    got, want, _ = _first_tokens_with_probable_forbidden_draft(gemma, cut_forbidden=True)
    assert chisquare_pvalue(got, want) < BIAS_P


def test_grammar_state_refuses_a_forbidden_token_instead_of_aborting(gemma):
    state = _state(gemma, DIGITS)
    word = gemma.tokenize(b"hello", add_bos=False)[0]
    with pytest.raises(ValueError, match="does not allow"):
        state.accept(word)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        state.accept(gemma.n_vocab())
    state.accept(gemma.tokenize(b"7", add_bos=False)[0])  # still usable
    state.close()


# ---- real models end to end ---------------------------------------------------------------

PERSON = (
    "Name: Maria Lopez\nEmail: maria.lopez@example.com\nCity: Valencia\n"
    "Phone: +34 612 345 678\nOccupation: nurse"
)
FIELDS = ("name", "email", "city", "phone", "occupation")  # every one a required string
SCHEMA = {
    "type": "object",
    "properties": {field: {"type": "string"} for field in FIELDS},
    "required": list(FIELDS),
}
TEMPLATES = {
    "gemma": "<start_of_turn>user\n{}<end_of_turn>\n<start_of_turn>model\n",
    "qwen": "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n",
}
KW = dict(n_ctx=1024, n_threads=2, verbose=False, seed=0)


def _model_path(request, name):
    return request.getfixturevalue("gemma_path" if name == "gemma" else "qwen_path")


def _greedy(llm, prompt_tokens, grammar_text, n=80, **kw):
    grammar = llama_cpp.LlamaGrammar.from_json_schema(grammar_text, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    out = []
    for t in llm.generate(prompt_tokens, temp=0.0, grammar=grammar, **kw):
        if llama_cpp.llama_vocab_is_eog(vocab, t) or len(out) >= n:
            break
        out.append(int(t))
    return out


@pytest.mark.parametrize("name", ["gemma", "qwen"])
def test_greedy_json_schema_equals_plain_with_the_same_grammar(request, name, caplog, batch_noise):
    path = _model_path(request, name)
    plain = llama_cpp.Llama(model_path=path, **KW)
    spec = SpeculativeLlama(path, draft="lookup", draft_max=8, adaptive=False, **KW)
    prompt = TEMPLATES[name].format(f"Extract this person as JSON:\n{PERSON}")
    tokens = plain.tokenize(prompt.encode(), special=True)
    schema = json.dumps(SCHEMA)
    with caplog.at_level(logging.WARNING, logger="pyspec"):
        a = _greedy(plain, tokens, schema)
        b = _greedy(spec, tokens, schema)
    stats = spec.speculation.last
    assert not [r for r in caplog.records if "plain decoding loop" in r.message]
    assert stats.fallback_reason == "" and stats.verify_steps > 0 and stats.accepted > 5
    assert stats.grammar_rows > len(b) // 2
    if a != b:  # only at a near-tie of plain's own one-token logits (this build's bound)
        i = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        assert i < min(len(a), len(b)), "one output is a prefix of the other"
        gap = one_token_gap(plain, tokens, a[:i], a[i], b[i])
        bound = batch_noise(path).tie_bound
        assert gap < bound, f"outputs part at token {i} with a logit gap of {gap} (bound {bound})"
    text = spec.detokenize(b).decode()
    assert json.loads(text)["email"] == "maria.lopez@example.com"
    plain.close()
    spec.close()


@pytest.mark.parametrize("name", ["gemma", "qwen"])
def test_json_schema_chat_completion_gives_valid_json_speculatively(request, name):
    spec = SpeculativeLlama(_model_path(request, name), draft="lookup", **KW)
    for response_format in ({"type": "json_object", "schema": SCHEMA}, {"type": "json_object"}):
        out = spec.create_chat_completion(
            [{"role": "user", "content": f"Extract this person as JSON:\n{PERSON}"}],
            response_format=response_format,
            temperature=0.7,
            seed=3,
            max_tokens=160,
        )
        value = json.loads(out["choices"][0]["message"]["content"])
        assert isinstance(value, dict)
        if "schema" in response_format:
            assert set(value) == set(SCHEMA["required"])
        assert spec.speculation.last.fallback_reason == ""
        assert spec.speculation.last.grammar_rows > 0
        # the unsure rule (on by default) read the raw rows' top probabilities on the host
        confidence = spec.speculation.last_request.confidence
        assert confidence and all(0 < c <= 1 for c in confidence)
    spec.close()


def test_logits_processor_sees_each_verify_row_with_its_history(gemma_path, batch_noise):
    """Called once per verify row with prompt + output + the drafts before the row, as plain
    llama-cpp-python calls it per token; its effect (a banned token) is honoured exactly."""
    plain = llama_cpp.Llama(model_path=gemma_path, **KW)
    spec = SpeculativeLlama(gemma_path, draft="lookup", draft_max=8, adaptive=False, **KW)
    prompt = TEMPLATES["gemma"].format(
        "Repeat exactly: the cat sat on the mat, the cat sat on the mat, the cat sat on the mat."
    )
    banned = plain.tokenize(b" mat", add_bos=False)[0]
    calls = []

    def ban(input_ids, scores):
        calls.append(np.array(input_ids))
        scores[banned] = -np.inf
        return scores

    def run(llm):
        calls.clear()
        out = llm.create_completion(
            prompt,
            max_tokens=30,
            temperature=0.0,
            logits_processor=llama_cpp.LogitsProcessorList([ban]),
        )
        return out["choices"][0]["text"], list(calls)

    text_plain, calls_plain = run(plain)
    text_spec, calls_spec = run(spec)
    stats = spec.speculation.last
    assert " mat" not in text_spec and " mat" not in text_plain
    tie = compare_texts(
        plain,
        plain.tokenize(prompt.encode(), special=True),
        text_plain,
        text_spec,
        batch_noise(gemma_path).tie_bound,
    )
    assert stats.fallback_reason == "" and stats.verify_steps > 0
    # Plain calls it once per emitted token with everything before that token; every such
    # history (up to a near-tie, if the texts part at one) appears among the speculative
    # calls (which also see rejected drafts' rows).
    seen = {tuple(c) for c in calls_spec}
    shared = calls_plain if tie is None else calls_plain[: tie.position + 1]
    assert all(tuple(c) in seen for c in shared)
    # One call per verify row: the prompt's row, then 1 + the drafts of every round.
    assert len(calls_spec) == 1 + stats.verify_steps + stats.plain_steps + stats.drafted
    plain.close()
    spec.close()


def test_a_raising_logits_processor_leaves_the_model_consistent(gemma_path):
    spec = SpeculativeLlama(gemma_path, draft="lookup", **KW)
    prompt = "The cat sat on the mat. The cat sat on the"
    want = spec.create_completion(prompt, max_tokens=12, temperature=0.0)["choices"][0]["text"]
    n = [0]

    def fails_on_third_row(input_ids, scores):
        n[0] += 1
        if n[0] == 3:
            raise RuntimeError("processor failed")
        return scores

    with pytest.raises(RuntimeError, match="processor failed"):
        spec.create_completion(
            prompt, max_tokens=12, temperature=0.0, logits_processor=[fails_on_third_row]
        )
    again = spec.create_completion(prompt, max_tokens=12, temperature=0.0)["choices"][0]["text"]
    assert again == want
    spec.close()


def test_grammar_with_a_draft_model_cuts_or_rejects_forbidden_drafts(qwen_path, request):
    draft = str(
        __import__("pyspec.testing.models", fromlist=["ensure_model"]).ensure_model(
            "qwen2.5-coder-0.5b"
        )
    )
    spec = SpeculativeLlama(qwen_path, draft=draft, draft_max=6, adaptive=False, **KW)
    prompt = TEMPLATES["qwen"].format(f"Extract this person as JSON:\n{PERSON}")
    grammar = llama_cpp.LlamaGrammar.from_json_schema(json.dumps(SCHEMA), verbose=False)
    for temperature in (0.0, 0.8):
        out = spec.create_completion(
            prompt, max_tokens=120, temperature=temperature, seed=5, grammar=grammar
        )
        assert json.loads(out["choices"][0]["text"])["city"]
        stats = spec.speculation.last
        assert stats.verify_steps > 0 and stats.accepted > 0
    spec.close()


ANSWERS = 'root ::= " " ("yes" | "no" | "maybe") "."'
QA_PROMPT = (
    "Q: Is the sky blue? A: yes.\nQ: Is fire cold? A: no.\nQ: Will it rain tomorrow? "
    "A: maybe.\nQ: Is ice cold? A: yes.\nQ: Can fish fly? A: no.\nQ: Is the sea deep? A:"
)


def _exact_outputs(llm, prompt_tokens, grammar: str, params) -> dict:
    """Every text the grammar lets the sampler emit, with its exact probability: the chain's
    distribution (llama.cpp's transforms on the row masked over the whole vocabulary) at
    every node of the tree of token paths, one plain decode per node."""
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    outputs: dict = {}

    def walk(prefix, state, prob):
        llm.reset()
        llm.eval(prompt_tokens + prefix)
        row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        dist = reference_distribution(_full_mask(state, row), params)
        for t in np.flatnonzero(dist > 0):
            p = prob * dist[t]
            if llama_cpp.llama_vocab_is_eog(vocab, int(t)):
                text = llm.detokenize(prefix).decode()
                outputs[text] = outputs.get(text, 0.0) + p
                continue
            following = state.copy()
            following.accept(int(t))
            walk(prefix + [int(t)], following, p)
            following.close()

    start = _state(llm, grammar)
    walk([], start, 1.0)
    start.close()
    return outputs


def test_sampled_speculative_outputs_follow_the_exact_constrained_distribution(gemma, gemma_path):
    """End to end on a real model: lookup drafts the answers of the prompt (rows verified
    with drafts before them, the grammar state rolled forward per row and back on
    rejection); the distribution of whole outputs must be the one the chain gives."""
    # min-p 0.001 keeps the outputs (it cuts only logits 6.9 below the best) and lets the
    # walk stop early on the last row, where only end-of-generation tokens are allowed.
    params = pyspec.SamplingParams(temperature=1.5, top_k=40, top_p=1.0, min_p=0.001, seed=0)
    tokens = gemma.tokenize(QA_PROMPT.encode())
    exact = _exact_outputs(gemma, tokens, ANSWERS, params)
    assert len(exact) >= 3 and abs(sum(exact.values()) - 1.0) < 1e-6, exact
    spec = SpeculativeLlama(gemma_path, draft="lookup", draft_max=4, adaptive=False, **KW)
    grammar = llama_cpp.LlamaGrammar.from_string(ANSWERS, verbose=False)
    texts = list(exact)
    got = []
    for seed in range(300):
        out = spec.create_completion(
            QA_PROMPT,
            max_tokens=10,
            temperature=1.5,
            top_k=40,
            top_p=1.0,
            min_p=0.001,
            seed=seed,
            grammar=grammar,
        )
        text = out["choices"][0]["text"]
        assert text in exact, f"{text!r} is not an output the grammar and chain allow"
        got.append(texts.index(text))
    total = spec.speculation.total
    assert total.verify_steps > 75 and total.accepted > 0
    assert chisquare_pvalue(np.array(got), np.array([exact[t] for t in texts])) > ALPHA
    spec.close()
