"""llama.cpp's own sampler chain, driven through llama-cpp-python's low-level API.

This is the chain llama-cpp-python builds in ``Llama._init_sampler`` for ``temp > 0``
(top-k, typical(1.0) = off, top-p, min-p, temperature, dist), applied to one row of logits
at a time, as ``Llama.generate`` does for every verify row today. pyspec uses it as the
reference its transforms must match, and benchmarks use it as the baseline to beat.
Requires ``llama-cpp-python``; the library never imports this module.
"""

from __future__ import annotations

import ctypes

import numpy as np

from pyspec.params import SamplingParams

try:
    import llama_cpp
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "pyspec.testing.llama_chain needs llama-cpp-python (pip install llama-cpp-python==0.3.36)"
    ) from exc

from pyspec.llama.constraints.grammar import TOKEN_DATA


class LlamaCppChain:
    """A llama.cpp sampler chain for one set of SamplingParams.

    ``with_dist=False`` stops before the draw, so ``probabilities`` can read the distribution
    the draw would use; ``with_dist=True`` adds llama.cpp's ``dist`` sampler (its own RNG,
    seeded with ``params.seed``) so ``sample`` draws a token exactly as llama-cpp-python does.
    """

    def __init__(self, params: SamplingParams, n_vocab: int, *, with_dist: bool = False):
        self.params = params
        self.n_vocab = n_vocab
        self._chain = llama_cpp.llama_sampler_chain_init(
            llama_cpp.llama_sampler_chain_default_params()
        )
        add = lambda s: llama_cpp.llama_sampler_chain_add(self._chain, s)  # noqa: E731
        # llama-cpp-python always adds the penalties sampler first (a no-op at 1, 0, 0).
        add(
            llama_cpp.llama_sampler_init_penalties(
                n_vocab,
                params.penalty_last_n,
                params.repeat_penalty,
                params.frequency_penalty,
                params.presence_penalty,
            )
        )
        if params.greedy:
            add(llama_cpp.llama_sampler_init_greedy())
        else:
            add(llama_cpp.llama_sampler_init_top_k(params.top_k))
            add(llama_cpp.llama_sampler_init_typical(1.0, 1))
            add(llama_cpp.llama_sampler_init_top_p(params.top_p, 1))
            add(llama_cpp.llama_sampler_init_min_p(params.min_p, 1))
            add(llama_cpp.llama_sampler_init_temp(params.temperature))
            if with_dist:
                add(llama_cpp.llama_sampler_init_dist(params.seed % 2**32))
        self._data = np.zeros(n_vocab, dtype=TOKEN_DATA)
        self._ids = np.arange(n_vocab, dtype=np.int32)
        self._array = llama_cpp.llama_token_data_array(
            data=self._data.ctypes.data_as(llama_cpp.llama_token_data_p),
            size=n_vocab,
            selected=-1,
            sorted=False,
        )

    def __del__(self):
        chain = getattr(self, "_chain", None)
        if chain is not None:
            llama_cpp.llama_sampler_free(chain)
            self._chain = None

    def set_history(self, tokens) -> None:
        """Resets the chain and accepts `tokens`, as the sampler would have while generating
        them (the penalties sampler keeps the last penalty_last_n)."""
        llama_cpp.llama_sampler_reset(self._chain)
        for tok in tokens:
            llama_cpp.llama_sampler_accept(self._chain, int(tok))

    def _apply(self, logits: np.ndarray) -> None:
        # What llama_sampler_sample does before the chain: one token_data entry per token.
        self._data["id"] = self._ids
        self._data["logit"] = logits
        self._data["p"] = 0.0
        self._array.size = self.n_vocab
        self._array.selected = -1
        self._array.sorted = False
        llama_cpp.llama_sampler_apply(self._chain, ctypes.byref(self._array))

    def sample(self, logits: np.ndarray) -> int:
        """One token, drawn by the chain (greedy or with ``with_dist=True``)."""
        self._apply(logits)
        return int(self._data["id"][self._array.selected])

    def probabilities(self, logits: np.ndarray) -> np.ndarray:
        """The dense distribution the chain's final draw uses (softmax of the survivors)."""
        self._apply(logits)
        n = self._array.size
        kept = self._data[:n]
        out = np.zeros(self.n_vocab, dtype=np.float64)
        if self.params.greedy:
            out[int(self._data["id"][self._array.selected])] = 1.0
            return out
        z = kept["logit"].astype(np.float64)
        w = np.exp(z - z.max())
        out[kept["id"]] = w / w.sum()
        return out
