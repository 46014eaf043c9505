"""The recorded workloads' vocabulary (Qwen2.5-Coder 1.5B's), as the loop gives its target's to
prompt lookup (``make_drafter``): a replay's lookup reads a request's instruction with it (the
reproduction rule's mention stops, lookup.py)."""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def recorded_text():
    """token -> text in the vocabulary the recordings were decoded with (loaded once, without
    the weights)."""
    import llama_cpp

    from pyspec.llama.drafting.factory import target_text
    from pyspec.testing.models import ensure_model

    vocabulary = llama_cpp.Llama(
        model_path=str(ensure_model("qwen2.5-coder-1.5b")), vocab_only=True, verbose=False
    )
    return target_text(vocabulary)
