"""The recorded workloads every replay reads: bench_draftless's requests (ShareGPT chats and
the code edits) with each prompt's output decoded once by plain llama-cpp-python and cached,
greedy or sampled, so a replay costs no model time after the first run on a machine.
"""

from __future__ import annotations

import hashlib
import json

from bench_draftless import MAX_TOKENS, THREADS, render_chat

# How the recorded outputs are decoded: as bench_draftless's live modes decode (flash attention
# on, llama.cpp's own default), so a replay follows the text the live bench's plain
# llama-cpp-python writes. With flash attention off (the recordings before session 40), 11 of
# the 24 greedy chats left that text at a near-tie, at their 0th-43rd token
# (docs/draftless-runs.md).
RECORDING = dict(n_ctx=4096, n_threads=THREADS, verbose=False, flash_attn=True)
RECORDING_KEY = "flash attention on"


def decoded_outputs(
    llm, prompts: list, temperature: float = 0.0, seed: int = 0, max_tokens: int = MAX_TOKENS
) -> list:
    """Each prompt's output (``max_tokens`` or to the end of text), decoded once by plain
    llama-cpp-python (``llm``, made with RECORDING's setup) and cached by the prompt's tokens
    (a fresh machine decodes them): greedy at temperature 0, else sampled with
    llama-cpp-python's default top-k, top-p and min-p, request i seeded with seed + i so that
    each recording repeats."""
    from pyspec.cache import cache_dir

    # named after the suite that first recorded them, kept so no machine decodes them again
    directory = cache_dir() / "tree-outlook"
    directory.mkdir(parents=True, exist_ok=True)
    outputs = []
    for i, ids in enumerate(prompts):
        # a sampled key names the request's own seed, which depends on its place in the list;
        # both name the decoding setup (before session 40 the outputs were decoded with
        # flash attention off, and 11 of the 24 greedy chats left the live bench's text)
        named = (
            [max_tokens, ids] if temperature == 0.0 else [max_tokens, temperature, seed + i, ids]
        )
        named = [RECORDING_KEY, *named]
        key = hashlib.sha256(json.dumps(named).encode()).hexdigest()[:16]
        path = directory / f"{key}.json"
        if path.is_file():
            outputs.append(json.loads(path.read_text()))
            continue
        if temperature > 0.0:
            llm.set_seed(seed + i)
        out = []
        for tok in llm.generate(ids, temp=temperature):
            if tok == llm.token_eos():
                break
            out.append(int(tok))
            if len(out) == max_tokens:
                break
        path.write_text(json.dumps(out))
        outputs.append(out)
        how = "greedy" if temperature == 0.0 else f"sampled at {temperature}"
        print(f"decoded {len(out)} tokens ({how}) for a {len(ids)}-token prompt", flush=True)
    return outputs


def recorded_workloads(
    n_chats: int,
    temperature: float = 0.0,
    seed: int = 0,
    workloads: list | None = None,
    max_tokens: int = MAX_TOKENS,
):
    """(workloads, prompts, outputs): n_chats ShareGPT chats and the code edits, or the given
    ``workloads`` ((workload, messages) pairs) instead, their prompt tokens, and their outputs
    (greedy, or sampled at ``temperature`` from ``seed``; up to ``max_tokens``; decoded once,
    cached)."""
    import llama_cpp

    from pyspec.testing.models import ensure_model

    target = str(ensure_model("qwen2.5-coder-1.5b"))
    llm = llama_cpp.Llama(model_path=target, **RECORDING)
    if workloads is None:
        from _code_edits import requests as code_requests
        from _sharegpt import chat_requests

        workloads = [("chat", r["messages"]) for r in chat_requests(llm, n_chats)]
        workloads += [("code edits", messages) for _, messages in code_requests()]
    prompts = [
        llm.tokenize(render_chat(llm, m).encode(), add_bos=True, special=True) for _, m in workloads
    ]
    outputs = decoded_outputs(llm, prompts, temperature, seed, max_tokens)
    llm.close()
    return workloads, prompts, outputs
