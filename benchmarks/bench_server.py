"""pyspec serve against plain llama_cpp.server, same model and requests (issue 12).

Both servers run on 127.0.0.1 at once (only one works at a time): plain
``python -m llama_cpp.server`` with ``--logits_all false`` (its fastest setting; its default,
on, copies every row of every request) and ``pyspec serve`` with lookup drafts, both on Gemma
3 270M with 2 threads. The same greedy requests alternate between them (plain, pyspec, pyspec,
plain, ...); the tokens/s of a request is its completion tokens over its wall time as the
``openai`` client sees it (prompt, HTTP and JSON included). Nothing is asserted about speed.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from bench_generation import REPEAT_PROMPT  # noqa: E402 (after the skips above)

from pyspec.testing.models import ensure_model  # noqa: E402

FREE_CHAT = [{"role": "user", "content": "Explain in a few paragraphs how a hash map works."}]
ROUNDS = 4
MAX_TOKENS = 128


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(argv, log):
    port = _free_port()
    proc = subprocess.Popen(
        argv + ["--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=dict(os.environ, PYSPEC_COST_CACHE="off"),
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(240):
        if proc.poll() is not None:
            raise RuntimeError(f"{argv[:4]} exited with {proc.returncode}")
        try:
            if httpx.get(f"{base}/v1/models", timeout=2).status_code == 200:
                return proc, openai.OpenAI(
                    base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=600
                )
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError("server did not start")


def _rate(client, case):
    t0 = time.perf_counter()
    if case == "repeat-completion":
        out = client.completions.create(
            model="m", prompt=REPEAT_PROMPT, max_tokens=MAX_TOKENS, temperature=0.0
        )
    else:
        out = client.chat.completions.create(
            model="m", messages=FREE_CHAT, max_tokens=MAX_TOKENS, temperature=0.0
        )
    return out.usage.completion_tokens / (time.perf_counter() - t0)


@pytest.mark.parametrize("case", ["repeat-completion", "free-chat"])
def bench_server_against_plain_llama_cpp_server(benchmark, generation_rows, tmp_path, case):
    path = str(ensure_model("gemma3-270m"))
    common = ["--n_ctx", "2048", "--n_threads", "2", "--chat_format", "gemma", "--verbose", "false"]
    with (
        open(tmp_path / "plain.log", "w") as plain_log,
        open(tmp_path / "pyspec.log", "w") as spec_log,
    ):
        plain, plain_client = _start(
            [
                sys.executable,
                "-m",
                "llama_cpp.server",
                "--model",
                path,
                "--logits_all",
                "false",
                "--interrupt_requests",
                "false",
                "--flash_attn",  # as pyspec serve runs by default
                "true",
            ]
            + common,
            plain_log,
        )
        spec, spec_client = _start(
            [sys.executable, "-m", "pyspec", "serve", "-m", path] + common, spec_log
        )
        pairs = []
        try:
            _rate(plain_client, case), _rate(spec_client, case)  # warm both

            def run():
                for i in range(ROUNDS):
                    if i % 2 == 0:
                        p, s = _rate(plain_client, case), _rate(spec_client, case)
                    else:
                        s, p = _rate(spec_client, case), _rate(plain_client, case)
                    pairs.append((p, s))

            benchmark.pedantic(run, rounds=1, iterations=1)
        finally:
            for proc in (plain, spec):
                proc.terminate()
                proc.wait(timeout=30)
    plain_rate = sum(p for p, _ in pairs) / len(pairs)
    spec_rate = sum(s for _, s in pairs) / len(pairs)
    ratios = sorted(s / p for p, s in pairs)
    benchmark.extra_info.update(plain_tok_s=plain_rate, pyspec_tok_s=spec_rate, ratios=ratios)
    generation_rows.append(
        f"server, gemma 270M, {case}: pyspec serve {spec_rate:.1f} tok/s vs llama_cpp.server "
        f"{plain_rate:.1f} tok/s = {spec_rate / plain_rate:.2f}x (per-pair {ratios[0]:.2f}-"
        f"{ratios[-1]:.2f}, {len(pairs)} ABBA pairs, {MAX_TOKENS} tokens, greedy)"
    )
