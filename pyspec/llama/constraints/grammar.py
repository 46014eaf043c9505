"""One llama.cpp grammar state, driven through llama-cpp-python's low-level API.

The speculative loop needs what llama-cpp-python's sampler chain never exposes: the grammar
after a *hypothetical* prefix (the drafts before a verify row) without committing to it, and
the verdict on a chosen subset of tokens rather than on the whole vocabulary. llama.cpp's
grammar sampler gives both: ``llama_sampler_clone`` copies a state (a rejected draft is
rolled back by dropping its copy), and ``llama_sampler_apply`` on a short candidate array
sets the logit of every token the grammar forbids to -inf, whatever the array holds.

llama.cpp aborts the process when a grammar sampler accepts a token it forbids, so
``accept`` checks the token first and raises instead.
"""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np

from pyspec.errors import InvalidInputError, InvalidRequestError

# The layout of llama.cpp's struct llama_token_data {int32 id; float logit; float p;}: a
# numpy array of it is a llama_token_data_array's data, passed without a copy.
TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True)
if TOKEN_DATA.itemsize != ctypes.sizeof(llama_cpp.llama_token_data):
    raise ImportError(
        f"llama_token_data is {ctypes.sizeof(llama_cpp.llama_token_data)} bytes in "
        f"this llama-cpp-python, pyspec expects {TOKEN_DATA.itemsize}"
    )


class GrammarState:
    """A grammar's parse state: which tokens it allows next. Owns a llama.cpp sampler."""

    __slots__ = ("_sampler", "_n_vocab")

    def __init__(self, sampler, n_vocab: int):
        self._sampler = sampler
        self._n_vocab = n_vocab

    @classmethod
    def parse(cls, llama: llama_cpp.Llama, grammar) -> "GrammarState":
        """The start state of a ``llama_cpp.LlamaGrammar`` (JSON schema grammars included)
        for this model's vocabulary. Raises InvalidRequestError when it does not parse
        (llama-cpp-python would hand llama.cpp a null sampler and crash on the next call)."""
        text = getattr(grammar, "_grammar", None)
        root = getattr(grammar, "_root", "root")
        if not isinstance(text, str):
            raise InvalidRequestError(
                f"grammar must be a llama_cpp.LlamaGrammar, got {type(grammar).__name__}"
            )
        vocab = llama_cpp.llama_model_get_vocab(llama.model)
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, text.encode(), root.encode())
        if not sampler:
            first = text.strip().splitlines()[0][:80] if text.strip() else "(empty)"
            raise InvalidRequestError(
                "the grammar does not parse (llama.cpp printed where on "
                f"stderr); its first line: {first!r}"
            )
        return cls(sampler, llama.n_vocab())

    def copy(self) -> "GrammarState":
        if self._sampler is None:
            raise InvalidInputError("this grammar state was closed")
        return GrammarState(llama_cpp.llama_sampler_clone(self._sampler), self._n_vocab)

    def close(self) -> None:
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            llama_cpp.llama_sampler_free(sampler)

    def __del__(self):
        self.close()

    def allowed(self, ids) -> np.ndarray:
        """For each token id in ``ids``, whether the grammar allows it next."""
        ids = np.asarray(ids, dtype=np.int32).ravel()
        if ids.size == 0:
            return np.zeros(0, dtype=bool)
        data = np.zeros(ids.size, dtype=TOKEN_DATA)
        data["id"] = ids
        array = llama_cpp.llama_token_data_array(
            data=data.ctypes.data_as(llama_cpp.llama_token_data_p),
            size=ids.size,
            selected=-1,
            sorted=False,
        )
        llama_cpp.llama_sampler_apply(self._sampler, ctypes.byref(array))
        return data["logit"] != -np.inf

    def accept(self, token: int) -> None:
        """Moves the state over ``token``; raises ValueError (instead of llama.cpp's abort)
        when the grammar forbids it."""
        if not 0 <= token < self._n_vocab:
            raise InvalidInputError(f"token {token} is outside the vocabulary of {self._n_vocab}")
        if not self.allowed([token])[0]:
            raise InvalidInputError(f"the grammar does not allow token {token} here")
        llama_cpp.llama_sampler_accept(self._sampler, int(token))
