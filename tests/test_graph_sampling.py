"""The in-graph sampler (libpyspec_llama): verify rows sampled inside llama.cpp's graph.

Exactness is shown two ways. The ggml ops run on real model rows outside a decode
(``sample_in_ggml``), thousands of draws per row: each draw is compared with the host
verifier's draw at the same (seed, position), a coupling, so the share of draws that differ
bounds the total-variation distance between the two samplers (the host's distribution is
exact, tests/test_exactness.py); and the draws pass a chi-square test against the exact
distribution, which a planted bug fails. Then the sampler attached to a real llama.cpp
context, and whole generations, give the host path's tokens.
"""

import logging

import llama_cpp
import numpy as np
import pytest
from reference import chisquare_pvalue

import pyspec
from pyspec._native.abi import Status
from pyspec._native.ffi import ffi
from pyspec.errors import InvalidRequestError, LogitsError, PyspecError
from pyspec.llama import SpeculativeLlama, enable_speculation
from pyspec.llama.batch_decoder import BatchDecoder
from pyspec.llama.graph.build import GraphSamplerUnavailable, build_graph_library
from pyspec.llama.graph.sampling import (
    GraphSampler,
    graph_library,
    point_mass_result,
    sample_in_ggml,
)
from pyspec.params import SamplingParams
from pyspec.tools.install_llama import LLAMA_CPP_PYTHON_VERSION

pytestmark = pytest.mark.skipif(
    llama_cpp.__version__ != LLAMA_CPP_PYTHON_VERSION,
    reason=f"the in-graph sampler is built for llama-cpp-python {LLAMA_CPP_PYTHON_VERSION}",
)

# (name, params, draws per row): top-k off walks the whole vocabulary; top-p with top-k off
# also sorts it (about 0.1 s a draw at 262144 on 2 cores), so it gets fewer draws.
CONFIGS = [
    ("llama-cpp-python defaults", dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05), 1500),
    ("top-k off, raw softmax", dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0), 1000),
    ("top-k off, top-p 0.9", dict(temperature=0.7, top_k=0, top_p=0.9, min_p=0.0), 200),
    ("top-k off, min-p 0.02, hot", dict(temperature=1.5, top_k=0, top_p=1.0, min_p=0.02), 1000),
    ("top-k 5, hot", dict(temperature=2.0, top_k=5, top_p=1.0, min_p=0.0), 1500),
]
# A draw the graph takes differently from the host is one whose uniform falls within float
# rounding of a boundary between two tokens' cumulative weights (README: In-graph sampling).
MAX_MISMATCH = 0.01
# With nothing cut, the draw walks the whole vocabulary's float running sum, where a token of
# the long tail carries less mass than the sum's rounding (measured: Gemma 10 in 1000).
MAX_MISMATCH_WHOLE_ROW = 0.02


def _entropy(p):
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def _widest_row(rows, params):
    """The row whose sampled distribution has the most entropy: the hardest to match."""
    return max(rows, key=lambda r: _entropy(pyspec.distribution(r, params)))


@pytest.fixture(scope="module", params=["qwen", "gemma"])
def model_rows(request):
    return request.param, request.getfixturevalue(f"{request.param}_logits")


@pytest.mark.model
@pytest.mark.parametrize("name, config, n_draws", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_ggml_draws_match_the_host_and_follow_the_distribution(model_rows, name, config, n_draws):
    model, rows = model_rows
    params = SamplingParams(seed=2024, **config)
    row = _widest_row(rows, params)
    positions = np.arange(100, 100 + n_draws)
    graph = sample_in_ggml(row, params, positions, n_threads=2)
    host = np.array([pyspec.sample(row, params, position=int(p)) for p in positions])
    mismatch = float(np.mean(graph != host))
    whole_row = config["top_k"] == 0 and config["top_p"] == 1.0 and config["min_p"] == 0.0
    bound = MAX_MISMATCH_WHOLE_ROW if whole_row else MAX_MISMATCH
    assert mismatch <= bound, f"{model} {name}: {mismatch:.2%} of draws differ from the host's"
    probs = pyspec.distribution(row, params).astype(np.float64)
    probs /= probs.sum()
    assert chisquare_pvalue(graph, probs) > 1e-3


@pytest.mark.model
@pytest.mark.parametrize(
    "penalties",
    [
        dict(repeat_penalty=1.3, frequency_penalty=0.2, presence_penalty=0.3),
        dict(repeat_penalty=0.7, penalty_last_n=8),
    ],
    ids=["repeat-freq-presence", "repeat-below-1-short-window"],
)
def test_ggml_penalised_draws_match_the_host(model_rows, penalties):
    """Penalties in the graph: the window's distinct tokens are gathered, penalised with
    rules.h's arithmetic and written back. The history repeats the row's best candidates,
    so the penalties change what is drawn."""
    model, rows = model_rows
    params = SamplingParams(seed=99, temperature=1.0, top_k=40, top_p=0.95, min_p=0.02, **penalties)
    row = _widest_row(rows, params)
    best = np.argsort(row)[::-1][:6]
    history = np.array(
        [best[0], best[1], best[0], 17, best[2], best[0], best[3], best[5]], np.int32
    )
    positions = np.arange(1000)
    graph = sample_in_ggml(row, params, positions, n_threads=2, history=history)
    host = np.array(
        [pyspec.sample(row, params, position=int(p), penalty_history=history) for p in positions]
    )
    assert np.mean(graph != host) <= MAX_MISMATCH
    unpenalised = sample_in_ggml(
        row,
        SamplingParams(seed=99, temperature=1.0, top_k=40, top_p=0.95, min_p=0.02),
        positions,
        n_threads=2,
    )
    assert np.mean(unpenalised != host) > 0.05  # the penalties do change the draws here
    probs = pyspec.distribution(row, params, penalty_history=history).astype(np.float64)
    assert chisquare_pvalue(graph, probs / probs.sum()) > 1e-3


@pytest.mark.model
@pytest.mark.parametrize("scale", [0.8, 1.25])
def test_planted_temperature_error_fails_both_checks(model_rows, scale):
    """A graph that scaled by the wrong temperature (one of the bugs a hand-built chain can
    have): the coupling and the chi-square both catch a 20-25% error."""
    model, rows = model_rows
    params = SamplingParams(seed=7, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)
    wrong = SamplingParams(seed=7, temperature=0.8 * scale, top_k=40, top_p=0.95, min_p=0.05)
    row = _widest_row(rows, params)
    positions = np.arange(1500)
    graph = sample_in_ggml(row, wrong, positions, n_threads=2)
    host = np.array([pyspec.sample(row, params, position=int(p)) for p in positions])
    assert np.mean(graph != host) > MAX_MISMATCH
    probs = pyspec.distribution(row, params).astype(np.float64)
    assert chisquare_pvalue(graph, probs / probs.sum()) < 1e-4


def test_flat_row_over_a_whole_vocabulary_stays_within_the_float_bound():
    """The worst case for float sums: a near-uniform row of 262144 logits, top-k off, where
    every token carries ~4e-6 of the mass. Blocked running sums keep the graph's draws within
    1% of the host's fixed-point ones (a plain float cumsum differed on ~40%)."""
    row = (np.random.default_rng(0).standard_normal(262144) * 3).astype(np.float32)
    params = SamplingParams(seed=11, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    positions = np.arange(300)
    graph = sample_in_ggml(row, params, positions, n_threads=2)
    host = np.array([pyspec.sample(row, params, position=int(p)) for p in positions])
    assert np.mean(graph != host) <= 0.02


def test_greedy_ggml_rows_are_an_argmax():
    """An exact tie at the top is broken by ggml's argmax (README: the one place the graph
    may pick another argmax than the host, which takes the lowest id)."""
    row = np.random.default_rng(3).standard_normal(5000).astype(np.float32)
    row[4321] = 9.0
    params = SamplingParams.greedy_params()
    assert sample_in_ggml(row, params, [0, 1]).tolist() == [4321, 4321]
    row[[17, 300, 999]] = 9.0
    assert set(sample_in_ggml(row, params, [0, 1]).tolist()) <= {17, 300, 999, 4321}


def test_bad_rows_and_params_raise_clear_errors():
    params = SamplingParams(seed=1)
    row = np.zeros(64, dtype=np.float32)
    row[3] = np.nan
    with pytest.raises(LogitsError, match="NaN"):
        sample_in_ggml(row, params, [0])
    with pytest.raises(ValueError, match="one non-empty row"):
        sample_in_ggml(np.zeros((2, 64), np.float32), params, [0])
    with pytest.raises(PyspecError, match="fixed size"):  # penalty_last_n=-1: the whole history
        sample_in_ggml(
            np.zeros(64, np.float32), SamplingParams(repeat_penalty=1.3, penalty_last_n=-1), [0]
        )
    with pytest.raises(PyspecError, match="history.*outside"):
        sample_in_ggml(
            np.zeros(64, np.float32), SamplingParams(repeat_penalty=1.3), [0], history=[3, 64]
        )
    with pytest.raises(PyspecError, match="negative"):
        sample_in_ggml(np.zeros(64, np.float32), params, [-1])


def test_another_llama_cpp_python_version_is_refused_with_both_versions_named(monkeypatch):
    monkeypatch.delenv("PYSPEC_LLAMA_GRAPH_LIBRARY", raising=False)
    monkeypatch.setattr(llama_cpp, "__version__", "0.3.99")
    with pytest.raises(GraphSamplerUnavailable, match=r"0\.3\.36.*0\.3\.99"):
        build_graph_library()


def test_point_mass_rule():
    assert point_mass_result(np.array([5, 6, 7]), [5, 6]) == (2, [5, 6, 7])
    assert point_mass_result(np.array([5, 9, 7]), [5, 6]) == (1, [5, 9])
    assert point_mass_result(np.array([4]), []) == (0, [4])


# ---- inside a real llama.cpp decode ---------------------------------------------------------


@pytest.fixture(scope="module")
def gemma_graph(gemma_path):
    llm = SpeculativeLlama(
        gemma_path, n_ctx=512, n_threads=2, verbose=False, draft_max=8, seed=3, sampling="graph"
    )
    yield llm
    llm.close()


def _batch_rows(llm, tokens, sampler=None):
    """Decodes tokens from position 0 with every position an output; the host rows (no
    sampler) or the sampler's tokens."""
    decoder = BatchDecoder(llm.ctx, llm.n_vocab(), len(tokens))
    try:
        decoder.remove_from(0)
        if sampler is not None:
            sampler.set_position(1)
            decoder.decode_sampled(tokens, 0, len(tokens))
            # Only what the sampler hands out crosses to the host: no row of logits (llama.cpp
            # copies a backend sampler's data->logits unless the sampler clears it).
            for i in range(len(tokens)):
                assert llama_cpp.llama_get_sampled_logits_count_ith(llm.ctx, i) == 0
                assert llama_cpp.llama_get_sampled_candidates_count_ith(llm.ctx, i) == 0
            return sampler.read(0, len(tokens))
        addr = decoder.decode(tokens, 0, len(tokens))
        import ctypes

        flat = np.ctypeslib.as_array(
            (ctypes.c_float * (len(tokens) * llm.n_vocab())).from_address(addr)
        )
        return flat.reshape(len(tokens), llm.n_vocab()).copy()
    finally:
        decoder.close()
        llm.n_tokens = 0


@pytest.mark.model
def test_logprobs_sampler_arguments_are_checked(gemma_graph):
    params = SamplingParams(seed=1)
    for bad in (-2, 65):
        with pytest.raises(PyspecError, match="n_top must be -1"):
            GraphSampler(gemma_graph.ctx, params, max_rows=2, n_top=bad)
    sampler = GraphSampler(gemma_graph.ctx, params, max_rows=2)  # no logprobs asked
    try:
        err = ffi.new("pyspec_error *")
        out = ffi.new("float[]", 2)
        status = graph_library().pyspec_graph_sampler_read_logprobs(
            sampler._handle, 0, 1, out, ffi.NULL, ffi.NULL, err
        )
        assert status == Status.SHAPE and b"without logprobs" in ffi.string(err.message)
    finally:
        sampler.detach()
    gemma_graph.create_completion("Hello", max_tokens=2)  # the context is usable afterwards
    assert gemma_graph.speculation.last.sampling == "graph"


@pytest.mark.model
@pytest.mark.parametrize(
    "config",
    [
        dict(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0),
        dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
        dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),
    ],
    ids=["greedy", "defaults", "raw"],
)
def test_rows_sampled_in_a_real_decode_equal_the_host_draws(gemma_graph, config):
    tokens = gemma_graph.tokenize(b"The quick brown fox jumps over the lazy dog, and then")[:9]
    rows = _batch_rows(gemma_graph, tokens)
    differ = 0
    for seed in range(12):
        params = SamplingParams(seed=seed, **config)
        sampler = GraphSampler(gemma_graph.ctx, params, max_rows=len(tokens))
        try:
            graph = _batch_rows(gemma_graph, tokens, sampler)
        finally:
            sampler.detach()
        host = [pyspec.sample(rows[i], params, position=1 + i) for i in range(len(tokens))]
        differ += int(np.sum(graph != np.array(host)))
    assert differ <= 1, f"{differ} of {12 * len(tokens)} rows differ"


@pytest.mark.model
@pytest.mark.parametrize("model", ["gemma", "qwen"])
def test_greedy_and_sampled_generations_equal_the_host_path(request, model):
    """Same batches, same tokens. The draft length is fixed: with the cost model on, each path
    drafts by its own timings, llama.cpp's logits depend slightly on the batch a row is
    computed in, and sampled outputs then part at a near-boundary draw (two host runs with
    draft_max 4 and 16 do too)."""
    path = request.getfixturevalue(f"{model}_path")
    prompt = "Write a Python function that checks whether a number is prime, then explain it."
    texts = {}
    for sampling in ("host", "graph"):
        llm = SpeculativeLlama(
            path,
            n_ctx=1024,
            n_threads=2,
            verbose=False,
            sampling=sampling,
            adaptive=False,
            draft_max=8,
        )
        try:
            for key, kw in {
                "greedy": dict(temperature=0.0),
                "s1": dict(seed=1),
                "penalised": dict(
                    seed=5, repeat_penalty=1.3, frequency_penalty=0.1, presence_penalty=0.2
                ),
            }.items():
                out = llm.create_completion(prompt, max_tokens=48, **kw)
                assert llm.speculation.last.sampling == sampling
                texts[sampling, key] = out["choices"][0]["text"]
        finally:
            llm.close()
    for key in ("greedy", "s1", "penalised"):
        assert texts["graph", key] == texts["host", key], key


@pytest.mark.model
def test_auto_samples_on_the_host_when_the_model_runs_on_the_cpu(gemma_path, caplog):
    """On the CPU the rows already sit in host memory and the host path measured faster
    (benchmarks/bench_graph_sampling.py): "auto" says so once and verifies on the host."""
    llm = SpeculativeLlama(gemma_path, n_ctx=512, n_threads=2, verbose=False)
    try:
        with caplog.at_level(logging.WARNING, logger="pyspec"):
            for _ in range(2):
                llm.create_completion("Hello", max_tokens=4)
                assert llm.speculation.last.sampling.startswith("host: the model runs on the CPU")
    finally:
        llm.close()
    said = [r.getMessage() for r in caplog.records if "sampled on the host" in r.getMessage()]
    assert len(said) == 1


def _stop_never(ids, row):
    return False


@pytest.mark.model
@pytest.mark.parametrize(
    "request_kw, reason",
    [
        (dict(logprobs=2, echo=True), "logprobs with echo"),
        (dict(logprobs=65), "more than 64 top logprobs"),
        (dict(logits_processor=[lambda ids, row: row]), "logits processors"),
        (dict(stopping_criteria=[_stop_never]), "stopping_criteria"),
        (
            dict(grammar=llama_cpp.LlamaGrammar.from_string('root ::= "a"+', verbose=False)),
            "grammars",
        ),
    ],
    ids=["logprobs-echo", "logprobs-65", "processor", "stopping", "grammar"],
)
def test_graph_mode_refuses_requests_that_read_rows_and_stays_usable(
    gemma_graph, request_kw, reason
):
    with pytest.raises(InvalidRequestError, match=reason):
        gemma_graph.create_completion("Hello", max_tokens=4, **request_kw)
    gemma_graph.create_completion("Hello", max_tokens=4)
    assert gemma_graph.speculation.last.sampling == "graph"


@pytest.mark.model
def test_llama_cpp_python_loop_works_after_a_graph_request(gemma_graph, caplog):
    """A fallback request (mirostat runs llama-cpp-python's loop) needs host logits: the
    sampler is detached when the graph request ends."""
    gemma_graph.create_completion("Once upon a time", max_tokens=8)
    assert gemma_graph.speculation.last.sampling == "graph"
    with caplog.at_level(logging.WARNING, logger="pyspec"):
        out = gemma_graph.create_completion(
            "Once upon a time", max_tokens=8, mirostat_mode=2, seed=4
        )
    assert gemma_graph.speculation.last.fallback_reason
    assert out["usage"]["completion_tokens"] > 0


@pytest.mark.model
def test_graph_mode_needs_a_context_that_samples_a_whole_round(gemma_path):
    plain = llama_cpp.Llama(gemma_path, n_ctx=256, n_threads=2, verbose=False)
    try:
        with pytest.raises(GraphSamplerUnavailable, match="1 output"):
            enable_speculation(plain, sampling="graph")
    finally:
        plain.close()


def test_unknown_sampling_mode_is_refused_before_the_model_loads():
    with pytest.raises(ValueError, match="sampling must be one of"):
        SpeculativeLlama("/nonexistent.gguf", sampling="device")
