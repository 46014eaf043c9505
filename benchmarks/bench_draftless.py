"""pyspec's free drafting against every draftless mode of llama.cpp's own C++ loop, on real
chats (ShareGPT, benchmarks/_sharegpt.py) and a code-editing workload (benchmarks/_code_edits.py),
and with PYSPEC_BENCH_MULTI_TURN=n on n ShareGPT conversations answered turn by turn, the
model's own answers as their history (benchmarks/_own_answers.py).

Qwen2.5-Coder 1.5B, greedy, flash attention on everywhere, the same prompt text for every
mode (the chat template rendered once, as llama-cpp-python renders it). Per request:

- llama-cpp-python plain (``llama_cpp.Llama``), pyspec's lookup before the suffix index
  (``_lookup_before.py``), and pyspec's lookup now (with the memory of earlier requests):
  decode tokens/s after the first token, and whole-request time (prompt included);
- llama.cpp's ``llama-speculative-simple`` (built from the sources vendored in the
  llama-cpp-python sdist with the installed wheel's CMake arguments: ``_llama_cpp_tools.py``)
  with each draftless type at its defaults: decode tokens/s as it reports them, and prompt
  + decode time (model loading left out);
- ``llama-bench`` tg once per run: the C++ plain decode rate (the tool has no plain mode:
  ``--spec-type none`` refuses to start).

Every speculative Python mode is asked for MAX_TOKENS (96) tokens as ``create_completion(
max_tokens=96)`` asks the loop (``CompletionOptions.max_tokens``: a round drafts at most what
is left of the request but one), and its rate, seconds and drafted/accepted counts are those
of the 96. Plain llama-cpp-python decodes up to PYTHON_TOKENS (168), one token a round, and its
rate is taken over the first 96. llama.cpp's tool decodes past its limit to the end of its last
accepted draft (up to 161 tokens for 96 asked) and reports its rate over all of them, so a
second lookup object, alive through the run beside the first, is asked after the C++ modes
for as many tokens as the request's best C++ mode decoded: ``rate_at_cpp``, pyspec's rate over
the same tokens. (Until session 20 that rate was read off one lookup run uncapped to 168
tokens, where the round that crosses the count counts whole: on the code edits a draft of
47 tokens verified for the last few, 0.7 s of a 2.3 s request.) pyspec's lookup is calibrated
first (``SpeculativeLlama.calibrate``, not timed), and the lookup as it was in session 36
runs beside it (``drafter.read_with(None)``: the request's instruction not read; the
reproduction rule off; given the same calibrated shape, as is the lookup asked for the C++
token counts): what reading an edit request and believing the text an answer reproduces
change. (Session
36's run had the rule on in the lookup, without the instruction's stops, and off beside it;
sessions 33-35 ran the remembered-copy rule off there, sessions 22-32 the sure-copy rule.)

Modes run in turn, in the opposite order for every other request, so a drifting load hits
all. The Python objects live through the whole run (a server's life): the memory fills with
the earlier requests, never the request itself. Results go to the JSON's extra_info; the
README table is generated from it (``readme_tables.py``).

    pyspec bench draftless      # or: pytest benchmarks/bench_draftless.py (PYSPEC_BENCH_CHATS=24)
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
import time
from pathlib import Path

import numpy as np
from _sharegpt import chats_asked, chats_passed_over, multi_turn_asked

N_CHATS = chats_asked(24)
CHATS_AFTER = chats_passed_over()  # (0: the usual chats; 24: the next ones, held out)
# Conversations also answered turn by turn, the model's own answers as their history
# (_own_answers: a workload of its own, "multi-turn chat"; none unless asked).
N_MULTI_TURN = multi_turn_asked()
MAX_TOKENS = 96
# llama.cpp's tool decodes past its limit to the end of its last accepted draft (up to 161
# tokens for 96 asked): plain llama-cpp-python decodes this far, one token a round, so that
# its rate over as many tokens as each C++ mode decoded reads off its own timestamps.
PYTHON_TOKENS = 168
THREADS = 2
CPP_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
BEFORE = "lookup of session 36"


def render_chat(llm, messages) -> str:
    """The prompt text llama-cpp-python's create_chat_completion gives the model."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    eos_id, bos_id = llm.token_eos(), llm.token_bos()
    formatter = Jinja2ChatFormatter(
        template=llm.metadata["tokenizer.chat_template"],
        eos_token=llm._model.token_get_text(eos_id) if eos_id != -1 else "",
        bos_token=llm._model.token_get_text(bos_id) if bos_id != -1 else "",
    )
    return formatter(messages=messages).prompt


def rate_over(stamps: list, n: int) -> float:
    """Decode tokens/s after the first token, over the first n tokens (fewer if it stopped)."""
    n = min(n, len(stamps))
    return (n - 1) / (stamps[n - 1] - stamps[0]) if n > 1 else 0.0


def run_python(llm, prompt_ids: list, limit: int = MAX_TOKENS) -> dict:
    """One greedy request. A speculative object is asked for ``limit`` tokens as
    ``create_completion(max_tokens=limit)`` asks its loop (no draft verified past them);
    plain llama-cpp-python, one token a round, decodes up to PYTHON_TOKENS. Its rate and
    seconds are those of its first MAX_TOKENS tokens, and ``_stamps`` (each token's time) lets
    ``run_requests`` take a rate over as many tokens as a C++ mode decoded."""
    from pyspec.llama.request import CompletionOptions, asking

    stamps = []
    spec = getattr(llm, "speculation", None)
    last = spec.last if spec is not None else None
    stop = limit if spec is not None else PYTHON_TOKENS
    t0 = time.perf_counter()
    with asking(CompletionOptions(max_tokens=stop)):
        for tok in llm.generate(prompt_ids, temp=0.0):
            stamps.append(time.perf_counter())
            if len(stamps) == stop or llm.token_eos() == tok:
                break
    total = time.perf_counter() - t0
    shown = min(limit, MAX_TOKENS, len(stamps))
    out = {
        "rate": rate_over(stamps, shown),
        "seconds": stamps[shown - 1] - t0,
        "tokens": shown,
        "_stamps": stamps,
    }
    if spec is not None:
        assert spec.last is not last, "the speculative object decoded without pyspec's loop"
        stats = spec.last
        rounds = stats.verify_steps + stats.plain_steps
        # What the loop spends per round outside the target's passes, the verifier and the
        # drafter (Python bookkeeping, llama-cpp-python's generate wrapper): item 7's cost.
        outside = (
            total
            - stats.prompt_seconds
            - stats.target_seconds
            - stats.verify_seconds
            - stats.draft_seconds
        )
        out.update(
            drafted=stats.drafted,
            accepted=stats.accepted,
            rounds=rounds,
            loop_ms_per_round=1000 * outside / max(rounds, 1),
            target_ms_per_round=1000 * stats.target_seconds / max(rounds, 1),
            verify_ms_per_round=1000 * stats.verify_seconds / max(rounds, 1),
            draft_ms_per_round=1000 * stats.draft_seconds / max(rounds, 1),
            memory_hits=stats.memory_hits,
            memory_lookups=stats.memory_lookups,
            realised_over_predicted=stats.realised_over_predicted,
            costly_steps=stats.costly_steps,
            # rounds each rule that reads the target's confidence decided (since session 36)
            unsure_holds=stats.unsure_holds,
            sure_copy_rounds=stats.sure_copy_rounds,
            remembered_rounds=stats.remembered_rounds,
            reproduced_rounds=stats.reproduced_rounds,
        )
    return out


def _geo(values):
    values = [v for v in values if v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else 0.0


def run_requests(
    workloads, modes, plain, python_modes, tools, target, workdir, cpp_extra=(), same_tokens=None
):
    """Every request in every mode, the modes in turn and in the opposite order for every
    other request (a drifting load hits all): one row per request, a result per mode. The
    C++ modes get the same prompt text (its token count is checked equal).

    ``same_tokens`` maps a speculative Python mode to a second object of the same setup,
    alive through the run: after the C++ modes it is asked for as many tokens as the
    request's best C++ mode decoded, and its timestamps give the mode's ``rate_at_cpp``
    (a rate over the C++ modes' token counts, no round verified past the largest). Plain
    llama-cpp-python's comes from its own timestamps; the other speculative modes, asked
    for MAX_TOKENS, have none."""
    same_tokens = same_tokens or {}
    from _llama_cpp_tools import run_speculative

    rows = []
    for i, (workload, rid, messages) in enumerate(workloads):
        text = render_chat(plain, messages)
        ids = plain.tokenize(text.encode(), add_bos=True, special=True)
        row = {"workload": workload, "id": rid, "prompt_tokens": len(ids)}
        for mode in modes if i % 2 == 0 else modes[::-1]:
            if mode.startswith("c++ "):
                got = run_speculative(
                    tools,
                    target,
                    text,
                    mode[4:],
                    n_predict=MAX_TOKENS,
                    threads=THREADS,
                    workdir=workdir,
                    extra=cpp_extra,
                )
                assert got["prompt_tokens"] == len(ids), (
                    f"{rid}: llama.cpp saw {got['prompt_tokens']} prompt tokens, we {len(ids)}"
                )
                got.pop("text")
            else:
                got = run_python(python_modes[mode], ids)
            row[mode] = got
        cpp = [m for m in modes if m.startswith("c++ ")]
        best = max(cpp, key=lambda m: row[m]["rate"], default=None)  # None: Python modes only
        for mode in python_modes:  # each over as many tokens as each C++ mode decoded
            stamps = row[mode].pop("_stamps")
            valid = cpp
            if mode in same_tokens:
                asked = max(1, row[best]["tokens"])
                twin = run_python(same_tokens[mode], ids, limit=asked)
                stamps = twin["_stamps"]
                row[mode]["same_tokens_run"] = {
                    k: v for k, v in twin.items() if k in ("drafted", "accepted", "rounds")
                } | {"asked": asked, "decoded": len(stamps)}
                # Only over exactly the tokens the twin was asked for and decoded: a count
                # it ran past would be read mid-round (the crossing round whole again).
                valid = [m for m in cpp if row[m]["tokens"] == asked == len(stamps)]
            elif getattr(python_modes[mode], "speculation", None) is not None:
                continue  # asked for MAX_TOKENS: nothing past them to rate
            row[mode]["rate_at_cpp"] = {m: rate_over(stamps, row[m]["tokens"]) for m in valid}
        rows.append(row)
        print(
            f"\n{workload} {rid} ({len(ids)} tokens): "
            + ", ".join(f"{m} {row[m]['rate']:.1f}" for m in modes),
            flush=True,
        )
    return rows


def summarise(rows, modes) -> dict:
    """Per workload: requests, decode tok/s (geometric means), seconds (sums), acceptance."""
    summary = {}
    cpp = [m for m in modes if m.startswith("c++ ")]
    for workload in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == workload]
        summary[workload] = {
            "requests": len(mine),
            "rate": {m: _geo([r[m]["rate"] for r in mine]) for m in modes},
            "seconds": {m: sum(r[m]["seconds"] for r in mine) for m in modes},
            # Each Python mode over as many tokens as each C++ mode decoded in the same request.
            "rate_at_cpp": {
                m: {
                    c: _geo([r[m]["rate_at_cpp"][c] for r in mine if c in r[m]["rate_at_cpp"]])
                    for c in cpp
                }
                for m in modes
                if all("rate_at_cpp" in r[m] for r in mine)
            },
            "acceptance": {
                m: sum(r[m].get("accepted", 0) for r in mine)
                / max(sum(r[m].get("drafted", 0) for r in mine), 1)
                for m in modes
            },
        }
    return summary


def _over_best_same_tokens(rows, cpp_modes) -> dict:
    """pyspec's lookup over as many tokens as each request's best C++ mode decoded, against
    that mode (geometric mean), over the requests where that rate exists, and their count."""
    ratios = []
    for r in rows:
        best = max(cpp_modes, key=lambda m: r[m]["rate"])
        if best in r["lookup"]["rate_at_cpp"]:
            ratios.append(r["lookup"]["rate_at_cpp"][best] / r[best]["rate"])
    return {
        "lookup_over_best_cpp_same_tokens": _geo(ratios),  # (0.0: no such request)
        "same_tokens_requests": len(ratios),
    }


def bench_draftless_modes(benchmark, monkeypatch):
    import llama_cpp
    from _code_edits import requests as code_requests
    from _llama_cpp_tools import bench_tg, ensure_tools
    from _lookup_before import PromptLookupBefore
    from _sharegpt import chat_requests

    from pyspec.llama import SpeculativeLlama
    from pyspec.testing.models import ensure_model

    monkeypatch.setenv("PYSPEC_COST_CACHE", "off")  # every run starts as a fresh machine
    tools = ensure_tools()
    target = str(ensure_model("qwen2.5-coder-1.5b"))
    # Flash attention on for every mode: llama.cpp's tools choose it by default (auto), and
    # llama-cpp-python leaves it off unless asked (flash_attn=True): 6% on plain decoding of
    # the 1.5B here. The same kernels on both sides, so what differs is the loops and drafts.
    common = dict(n_ctx=4096, n_threads=THREADS, verbose=False, flash_attn=True)
    plain = llama_cpp.Llama(model_path=target, **common)
    python_modes = {
        "plain": plain,
        "lookup before": SpeculativeLlama(
            target, draft=PromptLookupBefore(), memory=False, **common
        ),
        "lookup": SpeculativeLlama(target, draft="lookup", **common),
    }
    # The batch costs measured at every draft length once, as `pyspec generate`/`serve` do
    # on a model and setup's first start (SpeculativeLlama.calibrate), not timed here; the
    # lookup as it was in session 36 shows what reading the instruction and the reproduction
    # rule change (session 36 ran the rule on in the lookup and off here, sessions 33-35
    # the remembered-copy rule off, 22-32 the sure-copy rule, session 21 the unsure rule).
    python_modes[BEFORE] = SpeculativeLlama(target, draft="lookup", **common)
    python_modes[BEFORE].speculation.drafter.read_with(None)  # no request read, as then
    python_modes[BEFORE].speculation.controller.reproduced_floor = None
    python_modes[BEFORE].speculation.controller.finish_plan = False  # (session 39's)
    # The lookup asked for as many tokens as each request's best C++ mode decoded: a second
    # object (its memory sees every request once, as the first's does), calibrated alike.
    same_tokens = {"lookup": SpeculativeLlama(target, draft="lookup", **common)}
    # Measured once and given to the other two: the same curve for the objects compared
    # (three sweeps of 65 sizes take 4-5 minutes on the AVX2 Zen 3's 2 cores).
    shape = python_modes["lookup"].calibrate(progress=print)
    print("\n" + str(shape), flush=True)
    for llm in (python_modes[BEFORE], same_tokens["lookup"]):
        llm.use_calibration(shape)
    chats = chat_requests(plain, N_CHATS, skip=CHATS_AFTER)
    workloads = [("chat", r["id"], r["messages"]) for r in chats]
    workloads += [("code edits", rid, messages) for rid, messages in code_requests()]
    if N_MULTI_TURN:
        from _own_answers import multi_turn_requests

        turns = multi_turn_requests(N_MULTI_TURN)
        workloads += [("multi-turn chat", t["id"], t["messages"]) for t in turns]
    modes = list(python_modes) + [f"c++ {t}" for t in CPP_TYPES]
    cpp_modes = [f"c++ {t}" for t in CPP_TYPES]
    workdir = Path(tempfile.mkdtemp(prefix="pyspec-draftless-"))

    def run_all():
        return run_requests(
            workloads, modes, plain, python_modes, tools, target, workdir, same_tokens=same_tokens
        )

    rows = benchmark.pedantic(run_all, rounds=1, iterations=1)
    # Every SpeculativeLlama of the run, by a name of its own (the second lookup object
    # shares the key "lookup" in same_tokens).
    pyspec_objects = {n: m for n, m in python_modes.items() if n != "plain"} | {
        f"{n}, same tokens": m for n, m in same_tokens.items()
    }
    # Kept before anything is derived from them: an hour's measurement must outlive a
    # summary that fails (session 25 lost one to the KeyError fixed below).
    # The calibrated shape too: the replays (bench_slow_start.curves) can then weigh draft
    # lengths on the very curve the live run believed.
    benchmark.extra_info.update(
        max_tokens=MAX_TOKENS,
        threads=THREADS,
        chats_after=CHATS_AFTER,
        multi_turn_conversations=N_MULTI_TURN,
        modes=modes,
        rows=rows,
        calibration={str(n): c for n, c in sorted(shape.items())},
        # Whether each pyspec object's weights went into 2 MB pages (pyspec/llama/huge_pages.py):
        # a lone bare decode on the AMX Xeon ran 1.2x in them (session 42); plain
        # llama-cpp-python gets none.
        huge_pages={name: dataclasses.asdict(m.huge_pages) for name, m in pyspec_objects.items()},
    )
    tg = bench_tg(tools, target, n_gen=MAX_TOKENS, threads=THREADS)
    summary = summarise(rows, modes)
    for workload, s in summary.items():
        mine = [r for r in rows if r["workload"] == workload]
        s.update(
            {
                "memory_hit_rate": (
                    sum(r["lookup"]["memory_hits"] for r in mine)
                    / max(sum(r["lookup"]["memory_lookups"] for r in mine), 1)
                ),
                "lookup_over_best_cpp": _geo(
                    [
                        r["lookup"]["rate"] / max(r[f"c++ {t}"]["rate"] for t in CPP_TYPES)
                        for r in mine
                    ]
                ),
                # The same, each request's best C++ mode against lookup over as many tokens
                # (the requests whose second lookup decoded that many: one that stopped
                # sooner, at an end of text, has no rate over them).
                **_over_best_same_tokens(mine, cpp_modes),
            }
        )
    for m in pyspec_objects.values():
        m.close()
    plain.close()
    benchmark.extra_info.update(llama_bench_tg=tg, summary=summary)
    for workload, s in summary.items():
        print(
            f"\n{workload}: "
            + ", ".join(f"{m} {v:.2f}" for m, v in s["rate"].items())
            + f"; lookup / best C++ draftless {s['lookup_over_best_cpp']:.2f}x "
            f"({s['lookup_over_best_cpp_same_tokens']:.2f}x over the same tokens, "
            f"{s['same_tokens_requests']} requests); "
            f"memory hit rate {s['memory_hit_rate']:.2f}; llama-bench tg {tg:.2f}"
        )
    assert np.isfinite(tg)
