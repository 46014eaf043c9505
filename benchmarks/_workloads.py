"""What the benchmarks time: the cases, the logits and drafts they run on, and the baselines.

A ``Case`` names one verify call: which logits (real or random, vocabulary, dtype, k + 1
rows), which params, and whether the drafts carry draft probabilities. ``Workloads`` builds
each input once per session, so every measurement of a case (verify, read pass, llama.cpp
chain) runs on the very same array.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

import pyspec
from pyspec.testing.models import ensure_model

VOCAB_MODELS = {151936: "qwen2.5-coder-1.5b", 262144: "gemma3-270m"}
DRAFT_LENGTHS = (1, 4, 8, 16)
# The float16 and draft-probability variants run on a typical and a long draft only.
VARIANT_DRAFT_LENGTHS = (4, 16)
PARAMS = {"greedy": pyspec.SamplingParams.greedy_params(), "default": pyspec.SamplingParams()}

# Realistic input for a code model: the verify rows are the last rows of this prompt's logits.
PROMPT = '''def merge_sorted(left, right):
    """Merge two sorted lists into one sorted list."""
    result, i, j = [], 0, 0
    while i < len(left) and j < len(right):
        if left[i] <= right[j]:
            result.append(left[i])
            i += 1
'''

RANDOM_SCALE = 3.0  # random logits are standard normal * 3
DRAFT_NOISE = 0.3  # std of the noise that turns a target row into a "draft model" row
SEED = 1234


@dataclass(frozen=True)
class Case:
    source: str  # "real" (GGUF logits) or "random"
    vocab: int
    k: int  # number of drafts; the logits have k + 1 rows
    params_name: str  # key of PARAMS
    dtype: str = "float32"
    draft_probs: bool = False  # modified rejection sampling instead of point-mass drafts

    @property
    def params(self) -> pyspec.SamplingParams:
        return PARAMS[self.params_name]

    @property
    def input_label(self) -> str:
        return f"{self.source} {'f16' if self.dtype == 'float16' else 'f32'}"

    @property
    def params_label(self) -> str:
        return self.params_name + ("+q" if self.draft_probs else "")

    # The keys below say which cases share an input array or a baseline measurement.
    @property
    def array_key(self) -> tuple:
        return (self.source, self.vocab, self.dtype, self.k)

    @property
    def chain_key(self) -> tuple:
        return self.array_key + (self.params_name,)

    @property
    def row_key(self) -> tuple:
        return self.array_key + (self.params_label,)

    @property
    def group(self) -> str:
        return f"{self.input_label} V={self.vocab} k={self.k}"

    def __str__(self) -> str:
        return f"{self.source}-{self.dtype}-V{self.vocab}-k{self.k}-{self.params_label}"


def _cases(sources, dtype, draft_lengths, params_names, draft_probs=False) -> list:
    return [
        Case(source, vocab, k, params_name, dtype, draft_probs)
        for source in sources
        for vocab in VOCAB_MODELS
        for k in draft_lengths
        for params_name in params_names
    ]


MAIN_CASES = _cases(("real", "random"), "float32", DRAFT_LENGTHS, PARAMS)
FLOAT16_CASES = _cases(("real",), "float16", VARIANT_DRAFT_LENGTHS, PARAMS)
# Rejection sampling needs a stochastic target: draft probabilities with default params.
DRAFT_PROBS_CASES = _cases(("real",), "float32", VARIANT_DRAFT_LENGTHS, ("default",), True)
VERIFY_CASES = MAIN_CASES + FLOAT16_CASES + DRAFT_PROBS_CASES


def _first_per_key(cases, key) -> list:
    seen = {}
    for case in cases:
        seen.setdefault(key(case), case)
    return list(seen.values())


# Baselines depend only on the array (read pass) or the array and params (chain), so the
# draft-probability cases reuse the point-mass cases' measurements.
READ_PASS_CASES = _first_per_key(VERIFY_CASES, lambda c: c.array_key)
CHAIN_CASES = _first_per_key(VERIFY_CASES, lambda c: c.chain_key)


def load_real_logits(model_name: str, n_rows: int) -> np.ndarray:
    """The last ``n_rows`` rows of the model's logits over PROMPT, as contiguous float32.
    The model is freed before returning (its logits buffer alone is n_ctx x V floats)."""
    import llama_cpp

    path = ensure_model(model_name)
    llm = llama_cpp.Llama(str(path), n_ctx=512, logits_all=True, verbose=False, n_threads=2)
    try:
        tokens = llm.tokenize(PROMPT.encode())
        if len(tokens) < n_rows:
            raise ValueError(f"prompt has {len(tokens)} tokens, need at least {n_rows}")
        llm.reset()
        llm.eval(tokens)
        # A copy: the Llama's scores buffer goes away with it.
        rows = np.array(llm.scores[llm.n_tokens - n_rows : llm.n_tokens], dtype=np.float32)
    finally:
        llm.close()
        del llm
        gc.collect()
    return rows


def random_logits(vocab: int, n_rows: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n_rows, vocab), dtype=np.float32) * RANDOM_SCALE


def point_mass_drafts(logits: np.ndarray, case: Case) -> np.ndarray:
    """Drafts that verify accepts in full (the worst case: all k + 1 rows are read):
    the argmax for greedy, otherwise exactly what ``pyspec.sample`` draws at each position."""
    rows = logits[: case.k]
    if case.params.greedy:
        return np.argmax(rows, axis=1).astype(np.int32)
    return np.array(
        [pyspec.sample(row, case.params, i) for i, row in enumerate(rows)], dtype=np.int32
    )


def sampled_drafts_with_probs(logits: np.ndarray, case: Case, rng) -> tuple:
    """A stand-in draft model: each row's distribution under the same params after a small
    perturbation of the target's logits (dense float32 [k, V]), and a draft drawn from it."""
    probs = np.empty((case.k, case.vocab), dtype=np.float32)
    drafts = np.empty(case.k, dtype=np.int32)
    for i in range(case.k):
        noisy = logits[i].astype(np.float32) + rng.normal(0.0, DRAFT_NOISE, case.vocab).astype(
            np.float32
        )
        probs[i] = pyspec.distribution(noisy, case.params)
        support = np.flatnonzero(probs[i])
        weights = probs[i, support].astype(np.float64)
        drafts[i] = rng.choice(support, p=weights / weights.sum())
    return drafts, probs


@dataclass
class VerifyInput:
    logits: np.ndarray
    drafts: np.ndarray
    draft_probs: Optional[np.ndarray] = None


class Workloads:
    """Session cache of the inputs: each model is loaded once, each array built once."""

    def __init__(self):
        self._real_rows = {}  # vocab -> float32 [max k + 1, V]
        self._arrays = {}  # Case.array_key -> logits
        self._inputs = {}  # Case -> VerifyInput

    def _real(self, vocab: int) -> np.ndarray:
        if vocab not in self._real_rows:
            self._real_rows[vocab] = load_real_logits(VOCAB_MODELS[vocab], max(DRAFT_LENGTHS) + 1)
        return self._real_rows[vocab]

    def logits(self, case: Case) -> np.ndarray:
        key = case.array_key
        if key not in self._arrays:
            n_rows = case.k + 1
            if case.source == "real":
                rows = self._real(case.vocab)[-n_rows:]
            else:
                rows = random_logits(case.vocab, n_rows, SEED + case.vocab + case.k)
            # The cast to float16 happens here, outside anything timed.
            self._arrays[key] = np.ascontiguousarray(rows, dtype=np.dtype(case.dtype))
        return self._arrays[key]

    def verify_input(self, case: Case) -> VerifyInput:
        if case not in self._inputs:
            logits = self.logits(case)
            if case.draft_probs:
                rng = np.random.default_rng(SEED + case.k)
                drafts, probs = sampled_drafts_with_probs(logits, case, rng)
                self._inputs[case] = VerifyInput(logits, drafts, probs)
            else:
                self._inputs[case] = VerifyInput(logits, point_mass_drafts(logits, case))
        return self._inputs[case]


def read_pass(logits: np.ndarray) -> Callable[[], np.ndarray]:
    """One read of every logit: the floor a verifier that reads each row once can approach.

    numpy has no vectorised float16 max on x86 (it is ~100x slower than a read), so a float16
    array is read as int16 instead: the same bytes in one SIMD pass; only the cost matters."""
    view = logits.view(np.int16) if logits.dtype == np.float16 else logits
    return lambda: np.max(view, axis=1)


def llama_chain(logits: np.ndarray, params: pyspec.SamplingParams) -> Callable[[], list]:
    """llama.cpp's sampler chain applied row by row, as llama-cpp-python samples today."""
    from pyspec.testing.llama_chain import LlamaCppChain

    chain = LlamaCppChain(params, logits.shape[1], with_dist=True)
    return lambda: [chain.sample(row) for row in logits]


def verify_call(
    inp: VerifyInput, params: pyspec.SamplingParams, n_threads: Optional[int]
) -> Callable[[], pyspec.VerifyResult]:
    """One ``pyspec.verify`` call, from Python, as a caller would make it (list of drafts)."""
    drafts = inp.drafts.tolist()
    return lambda: pyspec.verify(
        inp.logits, drafts, inp.draft_probs, params=params, n_threads=n_threads
    )
