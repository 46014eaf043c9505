"""Speculative generation against plain llama-cpp-python, on real GGUF models.

Each case runs plain ``llama_cpp.Llama`` and ``pyspec.llama.SpeculativeLlama`` on the same
prompt, parameters and ``max_tokens`` in the same session, alternating (plain, spec) twice
so that drifting machine load hits both, and reports tokens per second (generation only:
the prompt is evaluated and timed separately), the ratio, the acceptance rate and the
speedup the cost model predicts from that acceptance. Nothing is asserted about speed.

At temperature > 0 a request's text is one random draw, and how much of it a drafter can
guess depends on the draw (Gemma's repeated file: most draws copy the earlier file, one in
four leaves it on the first line). Each round therefore runs three seeds, the same for plain
and speculative decoding; the ratio is over all of them, and the worst seed's ratio is
reported beside it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import pytest

from pyspec.llama import SpeculativeLlama
from pyspec.testing.models import ensure_model

CODE = """class InventoryReport:
    def __init__(self, items, tax_rate=0.08):
        self.items = items
        self.tax_rate = tax_rate

    def subtotal(self):
        total_price = 0
        for item in self.items:
            total_price += item.price * item.quantity
        return total_price

    def total(self):
        total_price = self.subtotal()
        if total_price > 100:
            total_price = total_price * 0.95
        return total_price * (1 + self.tax_rate)

    def describe(self):
        total_price = self.total()
        lines = [f"{item.name}: {item.quantity} x {item.price:.2f}" for item in self.items]
        lines.append(f"total: {total_price:.2f}")
        return "\\n".join(lines)
"""
EDIT_PROMPT = (
    "<|im_start|>user\nRename the variable `total_price` to `amount` everywhere in "
    f"this code and output the whole code, nothing else:\n```python\n{CODE}```"
    "<|im_end|>\n<|im_start|>assistant\n"
)
FREE_PROMPT = (
    "<|im_start|>user\nExplain in a few paragraphs how a hash map works."
    "<|im_end|>\n<|im_start|>assistant\n"
)
# A base model continuing a file that repeats an earlier file.
REPEAT_PROMPT = (
    f"# file: report_v1.py\n{CODE}\n# file: report_v2.py (identical copy)\n" + CODE[:120]
)

MODELS = {"qwen": "qwen2.5-coder-1.5b", "gemma": "gemma3-270m"}


@dataclass(frozen=True)
class GenCase:
    model: str
    draft: str  # "lookup" or "qwen-0.5b"
    prompt_name: str
    temperature: float
    max_tokens: int = 160

    @property
    def seeds(self):
        return (7,) if self.temperature == 0.0 else (7, 8, 9)

    @property
    def id(self):
        return f"{self.model}-{self.draft}-{self.prompt_name}-t{self.temperature}"


CASES = [
    GenCase("qwen", "lookup", "edit", 0.0),
    GenCase("qwen", "lookup", "edit", 0.8),
    GenCase("qwen", "lookup", "free", 0.0),
    GenCase("qwen", "qwen-0.5b", "edit", 0.0),
    GenCase("qwen", "qwen-0.5b", "free", 0.8),
    GenCase("gemma", "lookup", "repeat", 0.0),
    GenCase("gemma", "lookup", "repeat", 0.8),
    GenCase("gemma", "lookup", "free", 0.8),
]
PROMPTS = {"edit": EDIT_PROMPT, "free": FREE_PROMPT, "repeat": REPEAT_PROMPT}
KW = dict(n_ctx=2048, n_threads=2, verbose=False)


def _generation_speed(llm, prompt_tokens, case, seed):
    """(tokens, seconds) of generation after the prompt (prompt evaluated first, untimed)."""
    llm.reset()
    llm.set_seed(seed)
    gen = llm.generate(prompt_tokens, temp=case.temperature, top_k=40, top_p=0.95, min_p=0.05)
    n, start = 0, None
    eog = llama_cpp.llama_model_get_vocab(llm.model)
    for tok in gen:
        if start is None:  # the first token comes from the prompt's logits: start timing here
            start = time.perf_counter()
        n += 1
        if n > case.max_tokens or llama_cpp.llama_vocab_is_eog(eog, tok):
            break
    gen.close()
    return n - 1, time.perf_counter() - start


def _predicted_speedup(stats, ctl) -> float:
    """Speedup the cost model predicts from what was measured: the per-token acceptance a,
    the draft length of every verify step, the share of plain steps, the target's cost per
    batch size and the drafter's cost per token. Summed over the draft lengths actually used
    (probes of 2 beside drafts of 16), not at their mean: expected tokens are concave in k,
    so the mean would overstate them."""
    t1 = ctl.predicted_target(1)
    if not stats.verify_steps:
        return 1.0
    a = min(stats.per_token_acceptance, 0.999)
    tokens, seconds = float(stats.plain_steps), stats.plain_steps * t1
    for k, steps in stats.draft_lengths.items():
        tokens += steps * (1 - a ** (k + 1)) / (1 - a)
        seconds += steps * (ctl.predicted_target(k + 1) + k * ctl.draft_cost + ctl.overhead)
    return (tokens / seconds) * t1


def _accounted_speedup(stats, ctl) -> float:
    """Speedup the cost model's own cost accounting gives for the rounds that actually ran:
    the tokens emitted over the predicted cost of each round's batch. Unlike
    _predicted_speedup it needs no acceptance model, so realised / accounted isolates what
    the cost model does not see (loop overhead, drafting, sampling) from how well a
    geometric acceptance model fits the text."""
    t1 = ctl.predicted_target(1)
    seconds = stats.plain_steps * t1 + sum(
        steps * (ctl.predicted_target(k + 1) + k * ctl.draft_cost + ctl.overhead)
        for k, steps in stats.draft_lengths.items()
    )
    tokens = stats.plain_steps + stats.verify_steps + stats.accepted
    return (tokens / seconds) * t1 if seconds else 1.0


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def bench_generation(benchmark, case, generation_rows):
    path = str(ensure_model(MODELS[case.model]))
    draft = "lookup" if case.draft == "lookup" else str(ensure_model("qwen2.5-coder-0.5b"))
    plain = llama_cpp.Llama(model_path=path, seed=7, **KW)
    spec = SpeculativeLlama(path, draft=draft, seed=7, **KW)
    prompt = plain.tokenize(PROMPTS[case.prompt_name].encode(), special=True)
    runs = {(kind, seed): [] for kind in ("plain", "spec") for seed in case.seeds}

    def one_round():
        for seed in case.seeds:
            runs["plain", seed].append(_generation_speed(plain, prompt, case, seed))
            runs["spec", seed].append(_generation_speed(spec, prompt, case, seed))

    _generation_speed(spec, prompt, case, case.seeds[0])  # warm-up: the controller learns the costs
    benchmark.pedantic(one_round, rounds=2, iterations=1)

    def tokens_per_second(kind, seeds=case.seeds):
        done = [r for seed in seeds for r in runs[kind, seed]]
        return sum(n for n, _ in done) / sum(s for _, s in done)

    plain_tps, spec_tps = tokens_per_second("plain"), tokens_per_second("spec")
    worst = min(
        tokens_per_second("spec", [s]) / tokens_per_second("plain", [s]) for s in case.seeds
    )
    stats = spec.speculation.total
    predicted = _predicted_speedup(stats, spec.speculation.controller)
    accounted = _accounted_speedup(stats, spec.speculation.controller)
    ratio = spec_tps / plain_tps
    benchmark.extra_info.update(
        plain_tok_s=plain_tps,
        spec_tok_s=spec_tps,
        ratio=ratio,
        worst_seed_ratio=worst,
        seeds=list(case.seeds),
        acceptance=stats.acceptance_rate,
        effective_k=stats.effective_k,
        predicted_speedup=predicted,
        accounted_speedup=accounted,
    )
    generation_rows.append(
        f"{case.id:34s} plain {plain_tps:6.2f} tok/s  spec {spec_tps:6.2f} tok/s  "
        f"x{ratio:4.2f}"
        + (f" (worst seed x{worst:4.2f})" if len(case.seeds) > 1 else "")
        + f"  accept {100 * stats.acceptance_rate:5.1f}%  k {stats.effective_k:4.2f}  "
        f"verify/plain steps {stats.verify_steps}/{stats.plain_steps}  "
        f"predicted x{predicted:4.2f}  "
        f"realized/predicted {ratio / predicted:4.2f}  realized/accounted {ratio / accounted:4.2f}"
    )
    spec.close()
    plain.close()


LONG_PROMPT = (
    "<|im_start|>user\nSummarise this code:\n```python\n"
    + CODE * 6
    + "```<|im_end|>\n<|im_start|>assistant\n"
)

_RSS_SCRIPT = r"""
import resource, sys, time
import llama_cpp
from pyspec.llama import SpeculativeLlama
kind, path, draft, prompt = sys.argv[1], sys.argv[2], sys.argv[3], sys.stdin.read()
kw = dict(n_ctx=4096, n_threads=2, verbose=False, seed=1)
if kind == "plain":
    llm = llama_cpp.Llama(model_path=path, **kw)
else:
    llm = SpeculativeLlama(path, draft="lookup" if kind == "lookup" else draft, **kw)
t0 = time.perf_counter()
for chunk in llm.create_completion(prompt, max_tokens=48, temperature=0.0, stream=True):
    ttft = time.perf_counter() - t0
    break
print(ttft, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def _ttft_and_rss(kind: str, path: str, draft: str, prompt: str):
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _RSS_SCRIPT, kind, path, draft],
        input=prompt,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return float(out[0]), int(out[1]) / 1024  # seconds, MiB


def bench_time_to_first_token_and_memory(benchmark, generation_rows):
    """A ~1000-token prompt, each side in a fresh process (peak RSS is per process),
    alternating plain, lookup and draft-model speculation three times; medians. The draft
    model's own weights and cache are extra memory by nature: its line reports them apart."""
    path = str(ensure_model("qwen2.5-coder-1.5b"))
    draft = str(ensure_model("qwen2.5-coder-0.5b"))
    kinds = ("plain", "lookup", "draft")
    runs = {kind: [] for kind in kinds}

    def one_round():
        for kind in kinds:
            runs[kind].append(_ttft_and_rss(kind, path, draft, LONG_PROMPT))

    benchmark.pedantic(one_round, rounds=3, iterations=1)
    ttft = {k: sorted(t for t, _ in v)[len(v) // 2] for k, v in runs.items()}
    rss = {k: max(r for _, r in v) for k, v in runs.items()}
    n_prompt = len(
        llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False).tokenize(
            LONG_PROMPT.encode(), special=True
        )
    )
    ratio = {k: ttft[k] / ttft["plain"] for k in kinds}
    delta = {k: rss[k] - rss["plain"] for k in kinds}
    benchmark.extra_info.update(
        prompt_tokens=n_prompt,
        ttft_s=ttft,
        ttft_ratio=ratio,
        peak_rss_mib=rss,
        peak_rss_delta_mib=delta,
    )
    generation_rows.append(
        f"time to first token, {n_prompt}-token prompt: plain {ttft['plain']:.3f}s, lookup "
        f"{ttft['lookup']:.3f}s (x{ratio['lookup']:.3f}), 0.5B draft {ttft['draft']:.3f}s "
        f"(x{ratio['draft']:.3f}); peak RSS plain {rss['plain']:.0f} MiB, lookup "
        f"{delta['lookup']:+.0f} MiB, 0.5B draft {delta['draft']:+.0f} MiB (its weights: "
        f"{Path(draft).stat().st_size / 2**20:.0f} MiB; one 151936-wide fp32 row is 0.58 MiB)"
    )
