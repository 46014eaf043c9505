"""The reproduction rule and the lookup's reading of a request's instruction, replayed where
they act: `pyspec demo`'s rename, the code edits (96 tokens, and the whole file), requests
that carry a fenced file and ask for other code (``_code_questions``), tool calls, and the
chats, where they should change nothing: the bench's 24, the N_HELD_OUT that follow them
in the file (conversations no rule was chosen on), and N_MULTI_TURN conversations answered
turn by turn with the model's own answers as their history.

Three settings of the loop, one controller and one lookup with its memory through each
workload's requests (bench_slow_start.replay_row), on every batch curve the repository holds:

- "session 36": the lookup without the vocabulary (nothing read, no draft marked
  reproduced), the reproduction rule off: the loop's default before session 37;
- "copy's end": the lookup reads the instruction (its drafts of a reproduction end with the
  copied text), the rule off;
- "rule": both, the rule on: the loop's default since session 37.

Speedups over plain in cost units, each against "session 36" per request: the geometric
mean and the worst request. The demo's answer (greedy, up to 128 tokens) and the full-file
edits' (up to 600) are decoded once and cached, as the other recordings are
(bench_confidence_rules, bench_tool_prompts); greedy and sampled at 0.8.

    pyspec bench reproduction   # or: pytest benchmarks/bench_reproduction.py -s
"""

from __future__ import annotations

import numpy as np
from bench_confidence_rules import SAMPLED_TEMPERATURE, recorded_requests, replay_in_order
from bench_slow_start import _geo, curves
from bench_tool_prompts import recorded_tool_requests

SETTINGS = {  # name -> (the lookup reads the instruction, the confidence rules)
    "session 36": (False, "unsure + sure copy + remembered"),
    "copy's end": (True, "unsure + sure copy + remembered"),
    "rule": (True, "unsure + sure copy + remembered + reproduced"),
}
DEMO_TOKENS = 128
# ShareGPT chats past the bench's own, replayed so that a rule chosen on the 24 is checked on
# conversations it was not chosen on (session 40: on 120 of them the lookup led ngram-simple's
# replay by more than on the 24, docs/draftless-runs.md).
N_HELD_OUT = 120
# ShareGPT conversations of several human turns, each turn a request whose history holds the
# model's own earlier answers (_own_answers), as a local chat client sends them; the replay
# takes each answer's first 96 tokens (session 41).
N_MULTI_TURN = 24
# The chats every rule was chosen on: the file's first 24 that qualify, whatever
# PYSPEC_BENCH_CHATS asks of this run (a quick run of 5 must not hold out chats 6-24).
RULES_CHOSEN_ON = 24
FULL_FILE_TOKENS = 600


def demo_requests(temperature: float = 0.0, seed: int = 0) -> list:
    """`pyspec demo`'s prompt as a recorded request (its text is already a chat turn), its
    answer up to DEMO_TOKENS."""
    import llama_cpp
    from _recordings import RECORDING, decoded_outputs
    from bench_confidence_rules import recorded_confidences

    from pyspec.testing.models import ensure_model
    from pyspec.tools.cli import DEMO_PROMPT

    target = str(ensure_model("qwen2.5-coder-1.5b"))
    llm = llama_cpp.Llama(model_path=target, **RECORDING)
    prompt = llm.tokenize(DEMO_PROMPT.encode(), special=True)
    output = decoded_outputs(llm, [prompt], temperature, seed, DEMO_TOKENS)[0]
    llm.close()
    return [("demo", prompt, output, recorded_confidences([prompt], [output])[0])]


def full_file_requests(temperature: float = 0.0, seed: int = 0) -> list:
    """The code edits answered to the end of the file (up to FULL_FILE_TOKENS)."""
    from _code_edits import requests as code_requests

    workloads = [("full-file edits", messages) for _, messages in code_requests()]
    return recorded_requests(temperature, seed, workloads, max_tokens=FULL_FILE_TOKENS)


def held_out_start() -> int:
    """How many of the file's chats the held-out ones pass over: those the rules were chosen
    on, and those this run's bench workloads replay (PYSPEC_BENCH_CHATS) if they are more."""
    from bench_confidence_rules import N_CHATS

    return max(RULES_CHOSEN_ON, N_CHATS)


def held_out_chat_requests() -> list:
    """The N_HELD_OUT chats that follow the bench's own in the file (held_out_start), answered
    greedily at their last human turn (decoded once and cached, as the other recordings)."""
    import llama_cpp
    from _sharegpt import chat_requests

    from pyspec.testing.models import ensure_model

    model = str(ensure_model("qwen2.5-coder-1.5b"))
    vocabulary = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    chats = chat_requests(vocabulary, N_HELD_OUT, skip=held_out_start())
    vocabulary.close()
    return recorded_requests(workloads=[("held-out chat", chat["messages"]) for chat in chats])


def multi_turn_chat_requests() -> list:
    """The N_MULTI_TURN conversations answered turn by turn by the model itself
    (``_own_answers``): one request per human turn, in order, with the conversation so far
    (the model's answers) as its history, each answer's first 96 tokens replayed (a turn the
    model answered in fewer than 2 tokens, nothing to replay, is left out)."""
    from _own_answers import multi_turn_requests
    from bench_confidence_rules import recorded_confidences

    turns = [t for t in multi_turn_requests(N_MULTI_TURN) if len(t["answer"]) >= 2]
    prompts, outputs = [t["prompt"] for t in turns], [t["answer"][:96] for t in turns]
    confidences = recorded_confidences(prompts, outputs)
    return [("multi-turn chat", p, o, c) for p, o, c in zip(prompts, outputs, confidences)]


def code_question_requests(temperature: float = 0.0, seed: int = 0) -> list:
    """Requests that carry a fenced file and ask for something else (``_code_questions``):
    tests, a script, a port, one fixed method, prose, the file with type hints."""
    from _code_questions import requests as question_requests

    workloads = [("code questions", messages) for _, messages in question_requests()]
    return recorded_requests(temperature, seed, workloads)


def workloads() -> dict:
    """name -> (requests in order, max_tokens asked)."""
    greedy = recorded_requests()
    sampled = recorded_requests(SAMPLED_TEMPERATURE, 1)
    chats = [r for r in greedy if r[0] == "chat"]
    return {
        "demo, greedy": (demo_requests(), None),
        "demo, sampled": (demo_requests(SAMPLED_TEMPERATURE, 1), None),
        "96-token edits, greedy": ([r for r in greedy if r[0] != "chat"], 96),
        "96-token edits, sampled": ([r for r in sampled if r[0] != "chat"], 96),
        "full-file edits, greedy": (full_file_requests(), None),
        "full-file edits, sampled": (full_file_requests(SAMPLED_TEMPERATURE, 1), None),
        "code questions, greedy": (code_question_requests(), 96),
        "code questions, sampled": (code_question_requests(SAMPLED_TEMPERATURE, 1), 96),
        "tool calls": (recorded_tool_requests(), 96),
        "chats, then the edits": (chats + [r for r in greedy if r[0] != "chat"], 96),
        "chats, sampled": ([r for r in sampled if r[0] == "chat"], 96),
        "held-out chats": (held_out_chat_requests(), 96),
        "multi-turn chats, own answers": (multi_turn_chat_requests(), 96),
    }


def replay_settings(order: list, costs: dict, max_tokens) -> dict:
    """setting -> speedups over plain per request, in order."""
    from _vocabulary import recorded_text

    out = {}
    for name, (reads, rules) in SETTINGS.items():
        text = recorded_text() if reads else None
        by_workload = replay_in_order(order, costs, rules, max_tokens=max_tokens, token_text=text)
        out[name] = np.concatenate([np.array(v) for v in by_workload.values()])
    return out


def bench_reproduction(benchmark):
    sets = workloads()

    def run_all():
        table: dict = {}
        for curve, costs in curves().items():
            for name, (order, max_tokens) in sets.items():
                speedups = replay_settings(order, costs, max_tokens)
                before = speedups["session 36"]
                table.setdefault(curve, {})[name] = {
                    setting: {
                        "speedup": _geo(s),
                        "against session 36": _geo(s / before),
                        "worst": float(min(s / before)),
                    }
                    for setting, s in speedups.items()
                }
        return table

    table = benchmark.pedantic(run_all, rounds=1, iterations=1)
    benchmark.extra_info.update(settings=list(SETTINGS), speedup=table)
    for curve, rows in table.items():
        print(f"\n{curve}", flush=True)
        for name, by_setting in rows.items():
            print(
                f"  {name:26s} "
                + ", ".join(
                    f"{setting} {v['against session 36']:.3f}x (worst {v['worst']:.3f}x)"
                    for setting, v in by_setting.items()
                    if setting != "session 36"
                )
                + f"; session 36 {by_setting['session 36']['speedup']:.2f}x plain",
                flush=True,
            )
