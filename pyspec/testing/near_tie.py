"""The one rule for comparing outputs computed in different batch shapes.

llama.cpp's logits for a token depend slightly on the batch the token was evaluated in
(which matrix kernel ran, how the KV cells before it were computed). How much depends on the
CPU's kernels: AVX2 and AVX-512 builds, repacked and plain weights, round differently. So a
greedy speculative text may part from plain greedy text, but only where the row that
decided it held a near-tie, and "near" is measured on the running build:

- ``measure_batch_noise`` evaluates a continuation one token at a time (plain decoding's
  shape) and again in batches of the sizes a speculative loop uses. Per row it takes the
  differences d = batched - one-token of the logits, and records the largest |d| of any
  logit (``BatchNoise.max_abs``) and the largest spread max(d) - min(d) over the row's
  ``TOP`` most likely tokens (``BatchNoise.max_spread``).
- Two greedy runs can pick different tokens a and b from one row only if the gap
  ``|logit(a) - logit(b)|`` in one of the two versions of that row is at most
  ``|d_a - d_b|``, and a and b are both among the row's most likely tokens: at most the
  spread. ``BatchNoise.tie_bound`` is the largest spread seen times a margin for rows the
  measurement did not see (``MARGIN``). The largest |d| over the whole row bounds how far
  two versions of a row (``BatchNoise.row_bound``) and of a log-probability
  (``BatchNoise.logprob_bound``) may be apart.
- ``compare_greedy`` runs the reference and the other path, and at each divergence
  measures the reference's one-token gap there; a gap below the bound is a near-tie (both
  runs then continue from the reference's prefix, so an error after it is still caught),
  a gap above it fails with the gap and the bound in the message.

Every test that compares outputs across batch shapes takes its bound from here (through
the ``batch_noise`` fixture of ``tests/conftest.py``); no bound in it is a constant measured
once on one CPU.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

MARGIN = 1.5  # a row the measurement did not see may be noisier than the ones it saw
TOP = 16  # the tokens of a row that a greedy pick can flip between
DEFAULT_SIZES = (2, 5, 9, 17)  # verify batches: the last token and 1, 4, 8, 16 drafts
MEASURE_PROMPT = (
    "<|im_start|>user\nExplain, with a short Python example, how a dictionary differs from a "
    "list, and when to use each.<|im_end|>\n<|im_start|>assistant\n"
)


@dataclass
class BatchNoise:
    """How far batched logits were from one-token logits on this build."""

    max_abs: float  # the largest |batched - one-token| logit difference seen
    max_spread: float  # the largest spread of those differences over a row's top TOP
    rows: int  # rows compared (per batch size, summed)
    sizes: tuple  # the batch sizes measured
    per_size: dict = field(default_factory=dict)  # size -> its largest spread

    @property
    def tie_bound(self) -> float:
        """Largest one-token top-two gap at which two batch shapes may pick differently."""
        return MARGIN * self.max_spread

    @property
    def row_bound(self) -> float:
        """Largest difference of any logit between two batch shapes (each is at most max_abs
        from the one-token row)."""
        return 2.0 * MARGIN * self.max_abs

    @property
    def logprob_bound(self) -> float:
        """Largest difference of one token's log-softmax between two batch shapes: the logit
        moves by at most max_abs, and the log-normaliser by at most max_abs too."""
        return 2.0 * MARGIN * self.max_abs

    def describe(self) -> str:
        sizes = ", ".join(f"{s}: {v:.4f}" for s, v in sorted(self.per_size.items()))
        return (
            f"over {self.rows} rows batched vs one-token logits differ by up to "
            f"{self.max_abs:.4f}, their top-{TOP} differences spread by up to "
            f"{self.max_spread:.4f} (batch size: spread {sizes}); near-tie bound "
            f"{self.tie_bound:.4f}, logprob bound {self.logprob_bound:.4f}"
        )


def _rows_at(addr: int, n: int, n_vocab: int) -> np.ndarray:
    flat = np.ctypeslib.as_array((ctypes.c_float * (n * n_vocab)).from_address(addr))
    return flat.reshape(n, n_vocab).copy()


def measure_batch_noise(
    llama,
    prompt_tokens: Optional[Sequence[int]] = None,
    n_tokens: int = 32,
    sizes: Sequence[int] = DEFAULT_SIZES,
) -> BatchNoise:
    """Measures batched against one-token logits on ``llama`` (a ``llama_cpp.Llama``): the
    prompt once, then ``n_tokens`` greedy tokens one at a time, then the same tokens again in
    batches of each size with every row's logits. The Llama's cache is left empty
    (``n_tokens = 0``), so its next request evaluates afresh."""
    from pyspec.llama.batch_decoder import BatchDecoder

    if prompt_tokens is None:
        prompt_tokens = llama.tokenize(MEASURE_PROMPT.encode(), special=True)
    prompt = [int(t) for t in prompt_tokens]
    n_vocab = llama.n_vocab()
    step = llama.n_batch
    sizes = tuple(s for s in sizes if 1 < s <= step)
    if not sizes:
        raise ValueError(f"no batch size in 2..n_batch ({step}) to measure")
    if len(prompt) + n_tokens + 1 > llama.n_ctx():
        raise ValueError(
            f"the prompt ({len(prompt)} tokens) and {n_tokens} more do not fit "
            f"in n_ctx {llama.n_ctx()}"
        )
    decoder = BatchDecoder(llama.ctx, n_vocab, step)
    try:
        decoder.remove_from(0)
        for i in range(0, len(prompt), step):
            addr = decoder.decode(prompt[i : i + step], i, 1)
        row = _rows_at(addr, 1, n_vocab)[0]
        tokens, single = [], []
        for j in range(n_tokens):  # greedy, one token per decode: plain decoding's shape
            tokens.append(int(np.argmax(row)))
            addr = decoder.decode(tokens[-1:], len(prompt) + j, 1)
            row = _rows_at(addr, 1, n_vocab)[0]
            single.append(row)
        single = np.asarray(single)
        top = np.argsort(-single, axis=1)[:, :TOP]
        per_size, rows, max_abs = {}, 0, 0.0
        for size in sizes:
            decoder.remove_from(len(prompt))
            batched = []
            for i in range(0, n_tokens, size):
                chunk = tokens[i : i + size]
                addr = decoder.decode(chunk, len(prompt) + i, len(chunk))
                batched.append(_rows_at(addr, len(chunk), n_vocab))
            batched = np.concatenate(batched)
            finite = np.isfinite(single) & np.isfinite(batched)
            d = np.where(finite, batched - single, 0.0)
            max_abs = max(max_abs, float(np.max(np.abs(d))))
            d_top = np.take_along_axis(d, top, axis=1)
            per_size[size] = float(np.max(d_top.max(axis=1) - d_top.min(axis=1)))
            rows += n_tokens
    finally:
        decoder.remove_from(0)
        decoder.close()
        llama.n_tokens = 0
        llama._requires_eval = True
    return BatchNoise(max_abs, max(per_size.values()), rows, sizes, per_size)


def one_token_row(llama, prompt: Sequence[int], generated: Sequence[int] = ()) -> np.ndarray:
    """The logits after ``prompt + generated`` as plain decoding computes them: the prompt
    in n_batch chunks from an empty cache, then each generated token in a decode of its own.
    The Llama's cache is left empty."""
    llama.reset()
    llama.eval([int(t) for t in prompt])
    for t in generated:
        llama.eval([int(t)])
    row = np.ctypeslib.as_array(llama._ctx.get_logits_ith(-1), shape=(llama.n_vocab(),)).copy()
    llama.reset()
    return row


def one_token_gap(llama, prompt: Sequence[int], generated: Sequence[int], a: int, b: int) -> float:
    """|logit(a) - logit(b)| in ``one_token_row(llama, prompt, generated)``."""
    row = one_token_row(llama, prompt, generated)
    return abs(float(row[a]) - float(row[b]))


@dataclass
class Divergence:
    position: int  # index in the generated tokens
    reference: int  # the reference's token there
    other: int  # the other path's token
    gap: float  # |logit(reference) - logit(other)| in the reference's row


def compare_greedy(
    run_reference: Callable[[list], list],
    run_other: Callable[[list], list],
    gap_at: Callable[[list, int, int], float],
    bound: float,
    n: int,
    max_ties: int = 4,
    what: str = "outputs",
) -> list:
    """Greedy outputs of two paths, equal except at near-ties.

    ``run_x(prefix)`` continues the prompt followed by ``prefix`` (generated token ids) for up
    to ``n - len(prefix)`` tokens; ``gap_at(prefix, a, b)`` is the reference's one-token gap
    between tokens a and b after prompt + prefix. At a divergence whose gap is below
    ``bound`` both paths are forced onto the reference's tokens through it and compared
    again. Returns the near-ties found; raises AssertionError for a gap at or above the
    bound, for one output that is a strict prefix of the other, and for more than
    ``max_ties`` near-ties."""
    prefix: list = []
    ties: list = []
    while True:
        a = list(run_reference(list(prefix)))
        b = list(run_other(list(prefix)))
        if a == b:
            return ties
        i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        if i >= min(len(a), len(b)):
            raise AssertionError(
                f"{what}: one is a prefix of the other at token {len(prefix) + i} "
                f"(reference {len(prefix) + len(a)} tokens, other "
                f"{len(prefix) + len(b)})"
            )
        gap = float(gap_at(prefix + a[:i], a[i], b[i]))
        if not gap < bound:
            raise AssertionError(
                f"{what} diverge at token {len(prefix) + i} (reference {a[i]}, other {b[i]}) "
                f"where the reference's one-token logit gap is {gap:.4f}, above the near-tie "
                f"bound {bound:.4f} measured on this build"
            )
        ties.append(Divergence(len(prefix) + i, a[i], b[i], gap))
        if len(ties) > max_ties:
            raise AssertionError(
                f"{what}: more than {max_ties} near-tie divergences in {n} tokens: {ties}"
            )
        prefix += a[: i + 1]
        if len(prefix) >= n:
            return ties


def compare_texts(
    llama, prompt: Sequence[int], reference: str, other: str, bound: float, what: str = "texts"
) -> Optional[Divergence]:
    """Two greedy completion texts of one prompt, equal except at a near-tie: where they part,
    both are tokenized and the reference's one-token gap between the two tokens at the first
    difference must be below ``bound``. ``llama`` (a ``llama_cpp.Llama`` of the reference's
    model) is used for the tokenizer and to recompute the row; its cache is left empty.
    Returns the near-tie, or None when the texts are equal."""
    if reference == other:
        return None
    a = llama.tokenize(reference.encode(), add_bos=False, special=True)
    b = llama.tokenize(other.encode(), add_bos=False, special=True)
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    if i >= min(len(a), len(b)):
        raise AssertionError(f"{what}: one is a prefix of the other:\n{reference!r}\n{other!r}")
    gap = one_token_gap(llama, prompt, a[:i], a[i], b[i])
    if not gap < bound:
        raise AssertionError(
            f"{what} part at token {i} (reference {a[i]}, other {b[i]}) where the reference's "
            f"one-token logit gap is {gap:.4f}, above the near-tie bound {bound:.4f} measured on "
            f"this build:\n{reference!r}\n{other!r}"
        )
    return Divergence(i, a[i], b[i], gap)
