"""Draft/target vocabulary compatibility, checked the way llama.cpp's speculative example
does: same vocabulary type, same BOS/EOS and add-BOS/EOS flags, vocabulary sizes within
128 of each other, and identical token text from id 5 on (over the shared range)."""

from __future__ import annotations

import llama_cpp

from pyspec.errors import VocabularyMismatchError

MAX_VOCAB_SIZE_DIFFERENCE = 128
FIRST_CHECKED_TOKEN = 5


def _vocab(llama):
    return llama_cpp.llama_model_get_vocab(llama.model)


# llama.cpp's vocabulary types by name (SPM: SentencePiece, as in Llama 2 and Gemma; BPE:
# byte-level BPE, as in Qwen and Llama 3; ...), so an error says "SPM" rather than "1".
VOCAB_TYPE_NAMES = {
    getattr(llama_cpp, name): name[len("LLAMA_VOCAB_TYPE_") :]
    for name in dir(llama_cpp)
    if name.startswith("LLAMA_VOCAB_TYPE_")
}


def _describe(what: str, value) -> str:
    if what == "vocabulary type":
        return f"{VOCAB_TYPE_NAMES.get(value, 'unknown')} ({value})"
    if what.endswith("flag"):
        return "on" if value else "off"
    return repr(value)


def check_compatible(target, draft, *, sample_every: int = 1) -> None:
    """Raises VocabularyMismatchError naming the first difference."""
    vt, vd = _vocab(target), _vocab(draft)
    checks = [
        ("vocabulary type", llama_cpp.llama_vocab_type),
        ("BOS token", llama_cpp.llama_vocab_bos),
        ("EOS token", llama_cpp.llama_vocab_eos),
        ("add-BOS flag", llama_cpp.llama_vocab_get_add_bos),
        ("add-EOS flag", llama_cpp.llama_vocab_get_add_eos),
    ]
    for what, fn in checks:
        a, b = fn(vt), fn(vd)
        if a != b:
            raise VocabularyMismatchError(
                f"draft and target differ in {what}: target "
                f"{_describe(what, a)}, draft {_describe(what, b)}"
            )
    nt, nd = llama_cpp.llama_vocab_n_tokens(vt), llama_cpp.llama_vocab_n_tokens(vd)
    if abs(nt - nd) > MAX_VOCAB_SIZE_DIFFERENCE:
        raise VocabularyMismatchError(
            f"vocabulary sizes differ by more than {MAX_VOCAB_SIZE_DIFFERENCE}: "
            f"target {nt}, draft {nd}"
        )
    for tok in range(FIRST_CHECKED_TOKEN, min(nt, nd), sample_every):
        a = llama_cpp.llama_vocab_get_text(vt, tok)
        b = llama_cpp.llama_vocab_get_text(vd, tok)
        if a != b:
            raise VocabularyMismatchError(f"token {tok} differs: target {a!r}, draft {b!r}")
