"""ShareGPT conversations answered turn by turn by the target itself: each human turn is a
request whose history holds the model's own earlier answers, as a local chat client sends
them, though cut at ANSWER_TOKENS where a client would send them whole
(``_sharegpt.multi_turn_conversations`` picks the conversations). The answers are greedy,
decoded once by plain llama-cpp-python with the recordings' setup and cached
(``_recordings.decoded_outputs``), so the live bench (bench_draftless) and the
replays (bench_reproduction) see the same prompts.
"""

from __future__ import annotations

ANSWER_TOKENS = 200


def multi_turn_requests(n_conversations: int) -> list:
    """One dict per human turn, conversation by conversation and turn by turn: ``id``
    ("<conversation>#<turn>"), ``messages`` (the chat so far, ending with that human turn),
    ``prompt`` (its tokens in the model's chat template) and ``answer`` (the model's greedy
    answer, up to ANSWER_TOKENS, which the next turn's history holds)."""
    import llama_cpp
    from _recordings import RECORDING, decoded_outputs
    from _sharegpt import multi_turn_conversations
    from bench_draftless import render_chat

    from pyspec.testing.models import ensure_model

    llm = llama_cpp.Llama(model_path=str(ensure_model("qwen2.5-coder-1.5b")), **RECORDING)
    out = []
    try:
        for conversation in multi_turn_conversations(llm, n_conversations):
            messages = []
            for turn, said in enumerate(conversation["turns"]):
                messages.append({"role": "user", "content": said})
                text = render_chat(llm, messages)
                prompt = llm.tokenize(text.encode(), add_bos=True, special=True)
                answer = decoded_outputs(llm, [prompt], 0.0, 0, ANSWER_TOKENS)[0]
                out.append(
                    {
                        "id": f"{conversation['id']}#{turn}",
                        "messages": list(messages),
                        "prompt": prompt,
                        "answer": answer,
                    }
                )
                content = llm.detokenize(answer).decode(errors="replace")
                messages.append({"role": "assistant", "content": content})
    finally:
        llm.close()
    return out
