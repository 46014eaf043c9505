"""How pyspec joins llama-cpp-python: by class, not by patching objects. SpeculativeLlama's
generate and create_completion are real methods; enable_speculation makes an existing Llama
an instance of its class's speculative subclass; a request's options reach the loop as one
object, and nothing of a request is left behind on the model."""

import llama_cpp
import pytest

from pyspec.errors import ClosedError, InvalidInputError
from pyspec.llama import SpeculativeLlama, enable_speculation
from pyspec.llama.model import SpeculativeMethods
from pyspec.llama.request import CompletionOptions, asking, current_options

KW = dict(n_ctx=512, n_threads=2, verbose=False, seed=1)
PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"


def _no_instance_methods(llama) -> bool:
    return not {"generate", "create_completion", "__call__"} & set(vars(llama))


def test_speculative_llama_has_real_methods(gemma_path):
    llm = SpeculativeLlama(gemma_path, **KW)
    try:
        assert _no_instance_methods(llm)
        assert type(llm).generate is SpeculativeMethods.generate
        out = llm.create_completion(PROMPT, max_tokens=8, temperature=0.0, logprobs=2)
        assert out["usage"]["completion_tokens"] == 8
        assert current_options() is None  # the request's options went with it
        record = llm.speculation.last_request
        assert len(record.logprobs) >= 8 and record.logprobs_top == 2
        assert _no_instance_methods(llm)
    finally:
        llm.close()
    with pytest.raises(ClosedError):
        llm.create_completion(PROMPT, max_tokens=2)
    with pytest.raises(ClosedError):
        llm(PROMPT, max_tokens=2)
    llm.close()  # again: nothing happens


def test_enable_speculation_changes_the_class_not_the_object(gemma_path):
    llm = llama_cpp.Llama(model_path=gemma_path, **KW)
    plain = llm.create_completion(PROMPT, max_tokens=8, temperature=0.0)["choices"][0]["text"]
    spec = enable_speculation(llm, "lookup", draft_max=4)
    try:
        assert isinstance(llm, SpeculativeMethods) and isinstance(llm, llama_cpp.Llama)
        assert type(llm).__name__ == "LlamaWithSpeculation" and llm.speculation is spec
        assert _no_instance_methods(llm)
        out = llm.create_completion(PROMPT, max_tokens=8, temperature=0.0)["choices"][0]["text"]
        assert spec.last.emitted == 8
        assert out == plain or len(out) > 0  # greedy: equal but at a near-tie (other tests)
        with pytest.raises(InvalidInputError, match="speculatively already"):
            enable_speculation(llm)
    finally:
        llm.close()


def test_a_fallback_is_decided_once_by_create_completion(gemma_path, monkeypatch):
    """mirostat falls back; create_completion decides it from its own arguments and the
    generate call it makes reads that decision instead of deciding again."""
    import pyspec.llama.model as model

    calls = []
    real = model.fallback_reason

    def counting(*args, **kwargs):
        calls.append(args[1:])
        return real(*args, **kwargs)

    monkeypatch.setattr(model, "fallback_reason", counting)
    llm = SpeculativeLlama(gemma_path, **KW)
    try:
        llm.create_completion(PROMPT, max_tokens=4, mirostat_mode=2)
        assert llm.speculation.last.fallback_reason == "mirostat (mode 2)"
        assert len(calls) == 1
        calls.clear()
        prompt = llm.tokenize(PROMPT.encode())
        with asking(CompletionOptions(fallback="planted")):  # the decision generate is given
            gen = llm.generate(prompt, temp=0.0)
            next(gen)
            gen.close()
        assert calls == [] and llm.speculation.last.fallback_reason == "planted"
        gen = llm.generate(prompt, temp=0.0)  # a direct generate call decides for itself
        next(gen)
        gen.close()
        assert len(calls) == 1 and llm.speculation.last.fallback_reason == ""
    finally:
        llm.close()
