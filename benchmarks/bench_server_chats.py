"""pyspec serve against llama.cpp's own server, on real chats, through the ``openai`` client.

Every server holds Qwen2.5-Coder 1.5B with 2 threads, a context of 4096 tokens, one slot and
flash attention on, and all of them run at once on 127.0.0.1 (one works at a time):

- plain llama-cpp-python: ``python -m llama_cpp.server`` with ``--logits_all false`` (its
  fastest setting) and ``--flash_attn true``;
- ``pyspec serve`` as a user starts it: prompt lookup with its memory of earlier requests,
  the batch costs calibrated at its first start on this machine (kept in the cost cache;
  not timed); and ``pyspec serve --no-draft``, its plain decoding, so that what its drafts
  gain shows apart from what its decoding does (weights in 2 MB pages, one thread);
- llama.cpp's ``llama-server``, built from the sources vendored in the llama-cpp-python sdist
  with the CMake flags ``pyspec install-llama`` gave the wheel (``_llama_cpp_tools``): plain,
  and once per draftless ``--spec-type`` at its defaults.

The requests, in order: ShareGPT conversations answered turn by turn, each turn's history
holding the model's own greedy answers (``_own_answers``: the same messages for every
server, whatever each server answered), then the five code edits (``_code_edits``). Each
request goes to every server, the order rotating from one request to the next; greedy, 96
tokens, streamed, no repeat penalty on any server (llama_cpp.server's default is 1.1,
llama-server's 1.0). Measured on the client's clock, as a user of the server sees it: decode
tokens/s after the first streamed token, and whole-request seconds (sent to last chunk).
Tokens are the answer text's tokens in the model's vocabulary, the same count for the same
text on every server. pyspec's drafted and accepted tokens come from its answers' "pyspec"
field, llama-server's from its "timings"; pyspec's memory hit rate from its /metrics.

    PYSPEC_BENCH_SERVER_CONVERSATIONS=6 pyspec bench server-chats
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

MAX_TOKENS = 96
THREADS = 2
N_CTX = 4096
CPP_SPEC_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
PLAIN = "llama-cpp-python"
PYSPEC = "pyspec serve"
PYSPEC_PLAIN = "pyspec serve, no drafts"
CPP_PLAIN = "llama-server"


def conversations_asked() -> int:
    raw = os.environ.get("PYSPEC_BENCH_SERVER_CONVERSATIONS", "6")
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(
            f"PYSPEC_BENCH_SERVER_CONVERSATIONS must be a whole number >= 1, got {raw!r}"
        )
    return int(raw)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One server process on a free port, with an ``openai`` client once it answers."""

    def __init__(self, name: str, argv: list, log_path, *, start_timeout: float):
        self.name = name
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = open(log_path, "w")
        try:
            self.proc = subprocess.Popen(
                argv + ["--host", "127.0.0.1", "--port", str(self.port)],
                stdout=self.log,
                stderr=subprocess.STDOUT,
            )
        except BaseException:
            self.log.close()
            raise
        self.start_timeout = start_timeout
        self.client = None

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode} (log: {self.log.name})"
                )
            try:
                if httpx.get(f"{self.base}/v1/models", timeout=2).status_code == 200:
                    self.client = openai.OpenAI(
                        base_url=f"{self.base}/v1", api_key="x", max_retries=0, timeout=900
                    )
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        raise RuntimeError(f"{self.name} did not answer within {self.start_timeout:.0f} s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def ask(server: Server, messages: list) -> dict:
    """One streamed greedy chat request: the text, the client's clock at the first and last
    content chunks, and whatever speculation counts the server reports."""
    sent = time.perf_counter()
    stamps, pieces, extra = [], [], {}
    stream = server.client.chat.completions.create(
        model="m",
        messages=messages,
        max_tokens=MAX_TOKENS,
        temperature=0.0,
        stream=True,
        # llama_cpp.server (and so pyspec serve) penalises repeats by 1.1 unless asked,
        # llama-server does not: every server decodes plain greedy, as the history was
        extra_body={"repeat_penalty": 1.0},
    )
    for chunk in stream:
        fields = chunk.model_extra or {}
        if "pyspec" in fields:
            extra["drafted"] = fields["pyspec"]["drafted_tokens"]
            extra["accepted"] = fields["pyspec"]["accepted_tokens"]
            # its rounds' own rate after the first token: the client's rate over it is what
            # the streaming path (HTTP, the server's Python) costs, as llama-server's below
            extra["server_rate"] = fields["pyspec"].get("decode_tokens_per_second")
        timings = fields.get("timings") or {}
        if "predicted_n" in timings:  # llama-server's: draft counts only where it drafted
            extra["drafted"] = timings.get("draft_n", 0)
            extra["accepted"] = timings.get("draft_n_accepted", 0)
            # its own count and rate, as a cross-check of the client's
            extra["server_tokens"] = timings["predicted_n"]
            extra["server_rate"] = timings.get("predicted_per_second")
        for choice in chunk.choices:
            if choice.delta and choice.delta.content:
                stamps.append(time.perf_counter())
                pieces.append(choice.delta.content)
    done = time.perf_counter()
    return {
        "text": "".join(pieces),
        "pieces": pieces,
        "sent": sent,
        "stamps": stamps,
        "done": done,
        **extra,
    }


def rate_after_first(answer: dict, tokens: int, first_tokens: int = 1) -> float:
    """Decode tokens/s after the first streamed chunk (``first_tokens`` of the ``tokens``:
    one, unless a server held text back), on the client's clock; 0 where the answer has
    fewer than two chunks (nothing to time)."""
    stamps = answer["stamps"]
    after = tokens - first_tokens
    if after < 1 or len(stamps) < 2 or stamps[-1] <= stamps[0]:
        return 0.0
    return after / (stamps[-1] - stamps[0])


def memory_metrics(server: Server) -> dict:
    """pyspec's memory counters from its /metrics (summed over models)."""
    text = httpx.get(f"{server.base}/metrics", timeout=10).text
    out = {}
    for name in ("memory_lookups_total", "memory_hits_total", "memory_tokens"):
        values = re.findall(rf"^pyspec_{name}\{{[^}}]*\}} ([\d.e+]+)$", text, re.M)
        out[name] = sum(float(v) for v in values)
    return out


def _servers(model: str, tmp_path) -> list:
    from _llama_cpp_tools import SERVER_TARGETS, binary, ensure_tools

    cpp = binary(ensure_tools(SERVER_TARGETS), "llama-server")
    py = [sys.executable, "-m"]
    llama_common = ["--n_ctx", str(N_CTX), "--n_threads", str(THREADS), "--verbose", "false"]
    # (llama_cpp.server's batch passes take every CPU unless told, llama-server's -tb below)
    llama_common += ["--n_threads_batch", str(THREADS)]
    cpp_common = [str(cpp), "-m", model, "-c", str(N_CTX), "-t", str(THREADS)]
    cpp_common += ["-tb", str(THREADS), "-np", "1", "-fa", "on"]
    specs = [
        (
            PLAIN,
            py
            + ["llama_cpp.server", "--model", model, *llama_common]
            + ["--flash_attn", "true", "--logits_all", "false", "--interrupt_requests", "false"],
        ),
        # its first start on a machine calibrates the batch costs (minutes), as for a user
        (PYSPEC, py + ["pyspec", "serve", "-m", model, *llama_common]),
        # its plain decoding (2 MB pages, one decoding thread) apart from its drafting
        (PYSPEC_PLAIN, py + ["pyspec", "serve", "-m", model, *llama_common, "--no-draft"]),
        (CPP_PLAIN, cpp_common),
    ]
    specs += [(f"llama-server {t}", cpp_common + ["--spec-type", t]) for t in CPP_SPEC_TYPES]
    servers = []
    try:
        for name, argv in specs:  # started one by one: each load and calibration alone
            slug = re.sub(r"[^a-z0-9]+", "-", name.lower())
            servers.append(Server(name, argv, tmp_path / f"{slug}.log", start_timeout=1200))
            servers[-1].wait_ready()
            print(f"started {name}", flush=True)
    except BaseException:  # a server that did not start, or Ctrl-C: none is left running
        for s in servers:
            s.stop()
        raise
    return servers


def _requests(n_conversations: int) -> list:
    from _code_edits import requests as code_requests
    from _own_answers import multi_turn_requests

    turns = [("chat", r["id"], r["messages"]) for r in multi_turn_requests(n_conversations)]
    return turns + [("code edits", rid, messages) for rid, messages in code_requests()]


def _geo(values) -> float:
    values = [v for v in values if v > 0]
    return float(np.exp(np.mean(np.log(values)))) if values else 0.0


def bench_server_chats(benchmark, tmp_path):
    import llama_cpp

    from pyspec.testing.models import ensure_model

    model = str(ensure_model("qwen2.5-coder-1.5b"))
    requests = _requests(conversations_asked())
    vocab = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    try:
        servers = _servers(model, tmp_path)
    except BaseException:
        vocab.close()
        raise
    rows = []
    try:
        for s in servers:  # one untimed request each: first-request costs out of the way
            ask(s, [{"role": "user", "content": "Say hi."}])

        def run():
            for i, (workload, rid, messages) in enumerate(requests):
                shift = i % len(servers)
                row = {"workload": workload, "id": rid, "modes": {}}
                for s in servers[shift:] + servers[:shift]:
                    answer = ask(s, messages)
                    tokens = len(vocab.tokenize(answer["text"].encode(), add_bos=False))
                    first = answer["pieces"][0] if answer["pieces"] else ""
                    first_tokens = max(1, len(vocab.tokenize(first.encode(), add_bos=False)))
                    row["modes"][s.name] = {
                        "tokens": tokens,
                        "rate": rate_after_first(answer, tokens, first_tokens),
                        "seconds": answer["done"] - answer["sent"],
                        "first_token_seconds": (
                            answer["stamps"][0] - answer["sent"] if answer["stamps"] else None
                        ),
                        "server_tokens": answer.get("server_tokens"),
                        "server_rate": answer.get("server_rate"),
                        "drafted": answer.get("drafted"),
                        "accepted": answer.get("accepted"),
                        "same_text_as_plain": None,
                        "text": answer["text"],
                    }
                plain_text = row["modes"][PLAIN]["text"]
                for mode in row["modes"].values():
                    mode["same_text_as_plain"] = mode["text"] == plain_text
                rows.append(row)
                print(_row_line(row), flush=True)

        benchmark.pedantic(run, rounds=1, iterations=1)
        memory = memory_metrics(next(s for s in servers if s.name == PYSPEC))
    finally:
        for s in servers:
            s.stop()
        vocab.close()
    modes = [s.name for s in servers]
    summary = summarise(rows, modes)
    benchmark.extra_info.update(
        max_tokens=MAX_TOKENS,
        threads=THREADS,
        n_ctx=N_CTX,
        conversations=conversations_asked(),
        modes=modes,
        rows=rows,
        summary=summary,
        pyspec_memory=memory,
    )
    for workload, s in summary.items():
        print(f"\n{workload} ({s['requests']} requests):", flush=True)
        for mode in modes:
            m = s["modes"][mode]
            print(
                f"  {mode:28s} {m['rate']:6.2f} tok/s ({m['over_plain']:.3f}x plain), "
                f"{m['seconds']:7.1f} s in all, acceptance {m['acceptance']}",
                flush=True,
            )
        print(f"  pyspec over the best llama-server mode: {s['pyspec_over_best_cpp']}", flush=True)
    hits, lookups = memory["memory_hits_total"], memory["memory_lookups_total"]
    print(
        f"\npyspec's memory: {hits:.0f} hits in {lookups:.0f} lookups, "
        f"{memory['memory_tokens']:.0f} tokens held",
        flush=True,
    )


def _row_line(row: dict) -> str:
    modes = row["modes"]
    shown = ", ".join(f"{name} {m['rate']:.1f}" for name, m in modes.items())
    return f"{row['workload']} {row['id']}: {shown} tok/s"


def summarise(rows: list, modes: list) -> dict:
    """Per workload: each mode's decode rate (geometric mean over the requests), its ratio
    to plain llama-cpp-python (geometric mean of the per-request ratios), its whole-request
    seconds summed, and its acceptance; pyspec over the best llama-server mode by rate. The
    rates are taken over the requests every server timed (``untimed``: those left out)."""
    out = {}
    for workload in dict.fromkeys(r["workload"] for r in rows):
        every = [r for r in rows if r["workload"] == workload]
        mine = [r for r in every if all(m["rate"] > 0 for m in r["modes"].values())]
        per_mode = {}
        for mode in modes:
            rates = [r["modes"][mode]["rate"] for r in mine]
            ratios = [
                r["modes"][mode]["rate"] / r["modes"][PLAIN]["rate"]
                for r in mine
                if r["modes"][mode]["rate"] > 0 and r["modes"][PLAIN]["rate"] > 0
            ]
            drafted = [r["modes"][mode]["drafted"] for r in mine]
            accepted = [r["modes"][mode]["accepted"] for r in mine]
            known = None not in drafted and sum(drafted) > 0
            per_mode[mode] = {
                "rate": _geo(rates),
                "over_plain": _geo(ratios),
                "seconds": float(sum(r["modes"][mode]["seconds"] for r in mine)),
                "drafted": sum(drafted) if None not in drafted else None,
                "accepted": sum(accepted) if None not in accepted else None,
                "acceptance": round(sum(accepted) / sum(drafted), 3) if known else None,
                "same_text_as_plain": sum(r["modes"][mode]["same_text_as_plain"] for r in mine),
            }
        cpp = [m for m in modes if m.startswith("llama-server ")]
        best = max(cpp, key=lambda m: per_mode[m]["rate"]) if cpp else None
        out[workload] = {
            "requests": len(mine),
            "untimed": [r["id"] for r in every if r not in mine],
            "modes": per_mode,
            "best_cpp": best,
            "pyspec_over_best_cpp": (
                round(per_mode[PYSPEC]["rate"] / per_mode[best]["rate"], 3) if best else None
            ),
        }
    return out
