"""What the README shows between each pair of ``<!-- generated:NAME begin/end -->`` markers,
rendered from the suites' pytest-benchmark JSON (``_bench_json.Run``).

One function per section. Every number in a section comes from the JSON; the words around
them are fixed here, so a sentence never outlives the measurement it describes. A figure a
file does not hold (an older file, a suite run in part) leaves its sentence out rather than
showing a stale value.
"""

from __future__ import annotations

import math
import re
import statistics
from statistics import median

from _bench_json import MissingResults, Run, huge_pages_setting, kernels, machine
from _bench_json import load as load_run
from _cpp_request_time import request_seconds

# The benchmarks' models, by vocabulary size (_workloads.VOCAB_MODELS; not imported, since
# that module needs pyspec's library and this one must not).
VOCAB_LABEL = {151936: "Qwen 1.5B", 262144: "Gemma 270M"}


def _span(values, fmt="{:.2f}", suffix="") -> str:
    """'1.06-1.41x' for a range, '1.06x' when it is one value."""
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return (lo if lo == hi else f"{lo}-{hi}") + suffix


def _table(header, rows) -> list:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(row) + " |" for row in rows
    ]


# --- verify: fused verify against a read pass and llama.cpp's chain ----------------------


def _verify_rows(run: Run, function: str, threads: str) -> list:
    """extra_info of one verify function's benchmarks at 'default' or '1' threads."""
    return [
        b["extra_info"]
        for b in run.named(function)
        if b["name"].endswith(f"-threads-{threads}]") and "verify_over_read_pass" in b["extra_info"]
    ]


def verify_table(run: Run) -> list:
    rows = _verify_rows(run, "bench_verify", "default")
    if not rows:
        raise MissingResults(f"{run.path}: no bench_verify ratios")
    threads = sorted({e["n_threads"] for e in rows})
    out = [
        run.measured_line(),
        "",
        "Fused verify against one numpy read pass (`np.max(logits, axis=1)`) over the same "
        "rows and against llama.cpp's sampler chain applied row by row (what "
        "llama-cpp-python does today), ratios of medians measured in one run, every row "
        f"read (all drafts accepted), {'/'.join(map(str, threads))} threads (the default):",
        "",
    ]
    table = []
    for source in ("real", "random"):
        for vocab in sorted({e["vocab"] for e in rows}):
            cell = {
                (e["params"], e["k"]): e
                for e in rows
                if e["input"] == source and e["vocab"] == vocab and e["dtype"] == "float32"
            }
            if not cell:
                continue
            ks = sorted({k for _, k in cell})

            def ratio(params, cell=cell, ks=ks):
                return " / ".join(
                    f"{cell[params, k]['verify_over_read_pass']:.2f}"
                    if (params, k) in cell
                    else "-"
                    for k in ks
                )

            chain = [e["chain_over_verify"] for e in cell.values() if "chain_over_verify" in e]
            label = (
                f"real ({VOCAB_LABEL.get(vocab, vocab)})" if source == "real" else "random N(0, 3)"
            )
            table.append(
                (
                    label,
                    str(vocab),
                    " / ".join(map(str, ks)),
                    ratio("greedy"),
                    ratio("default"),
                    _span(chain, "{:.0f}", "x") if chain else "-",
                )
            )
    out += _table(
        (
            "logits",
            "V",
            "k",
            "greedy: verify / read",
            "default params: verify / read",
            "chain / verify",
        ),
        table,
    )
    return out + [""] + _verify_prose(run)


def _verify_prose(run: Run) -> list:
    """The one-thread, draft-probability and float16 figures, where the file has them (the
    ``verify`` suite has real float32 logits only; ``verify-all`` has the rest)."""
    sentences = []
    one = _verify_rows(run, "bench_verify", "1")
    real = [e["verify_over_read_pass"] for e in one if e["input"] == "real"]
    rand = [e["verify_over_read_pass"] for e in one if e["input"] == "random"]
    if real:
        s = f"With one thread verify is {_span(real, suffix='x')} a read pass on real logits"
        if rand:
            s += (
                f" (up to {max(rand):.2f}x on random logits, where the top-k 40 heap sees "
                "more insertions)"
            )
        sentences.append(s)
    probs = _verify_rows(run, "bench_verify_draft_probs", "default")
    if probs:
        point = [
            e["verify_over_read_pass"]
            for e in _verify_rows(run, "bench_verify", "default")
            if e["input"] == "real"
            and e["params"] == "default"
            and (e["vocab"], e["k"]) in {(p["vocab"], p["k"]) for p in probs}
        ]
        s = (
            "with dense draft probabilities (modified rejection sampling; `check_draft_probs` "
            "on, as by default, so q's rows are checked in numpy first) "
            f"{_span([e['verify_over_read_pass'] for e in probs], suffix='x')} the read pass"
        )
        if point:
            s += f", against {_span(point, suffix='x')} with point-mass drafts at the same V and k"
        sentences.append(s)
    half = _verify_rows(run, "bench_verify_float16", "default")
    if half:
        s = (
            "float16 logits are read directly: "
            f"{_span([e['verify_over_read_pass'] for e in half], suffix='x')}"
            " an int16 read of the same bytes"
        )
        chain = [e["chain_over_verify"] for e in half if "chain_over_verify" in e]
        if chain:
            s += f", {_span(chain, '{:.0f}', 'x')} faster than the chain"
        sentences.append(s)
    out = []
    if sentences:
        out.append("; ".join(sentences) + " (default threads unless said).")
    per_row = [
        b["extra_info"]["median_us"] / (b["extra_info"]["k"] + 1)
        for b in run.named("bench_llama_chain")
        if b["extra_info"].get("vocab") == 151936
        and b["extra_info"].get("input") == "real"
        and b["extra_info"].get("dtype") == "float32"
        and "median_us" in b["extra_info"]
    ]
    if per_row:
        out.append(
            f"For scale: llama.cpp's chain costs ~{median(per_row):.0f} µs per "
            "151936-wide row here (median over k and params)."
        )
    return out


# --- pyspec serve against llama_cpp.server ----------------------------------------------

SERVER_CASES = {
    "repeat-completion": "completion, repeated file",
    "free-chat": 'chat, free text ("how a hash map works")',
}


def server_table(run: Run) -> list:
    rows, pairs = [], set()
    for case, label in SERVER_CASES.items():
        e = run.one(f"bench_server_against_plain_llama_cpp_server[{case}]")["extra_info"]
        pairs.add(len(e["ratios"]))
        rows.append(
            (
                label,
                f"{e['plain_tok_s']:.1f} tok/s",
                f"{e['pyspec_tok_s']:.1f} tok/s",
                f"{e['pyspec_tok_s'] / e['plain_tok_s']:.2f}x ({_span(e['ratios'])})",
            )
        )
    return [
        run.measured_line(),
        "",
        "Both servers on Gemma 3 270M with 2 threads, plain `llama_cpp.server --logits_all "
        "false` (its fastest setting), the same greedy requests alternating, tokens/s as the "
        "`openai` client sees them (prompt, HTTP and JSON included), "
        f"{'/'.join(map(str, sorted(pairs)))} pairs:",
        "",
    ] + _table(
        ("request", "llama_cpp.server", "pyspec serve (lookup)", "ratio (per-pair range)"), rows
    )


# --- free text: speculative against plain, ABBA pairs ----------------------------------


def parity(run: Run) -> list:
    quiet = run.one("bench_free_text_parity[quiet]")["extra_info"]
    n = len(quiet["ratios"])
    out = [
        run.measured_line(),
        "",
        "The same greedy free-text request on Qwen 1.5B, plain and speculative in ABBA order, "
        f"{n} pairs, generation tokens/s from the first streamed token to the last.",
    ]
    chunks = quiet.get("streamed_chunks")
    if chunks:
        counts = sorted({c for pair in chunks for c in pair})
        out.append(
            f"Both stream {_span(counts, '{}')} tokens per request, with "
            f"{quiet['verify_rounds']} verify rounds in all (lookup finds nothing worth "
            "verifying)."
        )
    else:
        out.append(f"{quiet['verify_rounds']} verify rounds in all.")
    out.append(
        f"Without a CPU hog: median {quiet['median_ratio']:.3f}x plain (per-pair range "
        f"{_span(quiet['ratios'], '{:.2f}')}), mean rates {quiet['mean_rate_ratio']:.3f}x; "
        f"the speculative text equals plain's in {sum(quiet['same_text'])} of {n} pairs."
    )
    hog = [b for b in run.named("bench_free_text_parity") if b["name"].endswith("[hog]")]
    if hog:
        e = hog[0]["extra_info"]
        out.append(
            f"With a CPU hog throughout: median {e['median_ratio']:.3f}x (range "
            f"{_span(e['ratios'], '{:.2f}')}; the hog lands on whichever side runs)."
        )
    out.append(
        f"The per-pair spread ({_span(quiet['ratios'], '{:.2f}')}) is why one pair, or "
        "one run, says little about a difference of a few percent."
    )
    return out


# --- a new process's first three requests ----------------------------------------------

FIRST_REQUEST_CASES = {
    "qwen-rename": "Qwen 1.5B rename, lookup",
    "gemma-repeat": "Gemma 270M repeated file, lookup",
    "qwen-free": "Qwen 1.5B free text, lookup",
}


def first_requests(run: Run) -> list:
    found = {
        (b["params"]["case"], b["params"]["load"]): b["extra_info"]
        for b in run.named("bench_first_requests")
    }
    if not found:
        raise MissingResults(f"{run.path}: no bench_first_requests results")
    rows, gap_over_pass, later_spec, later_plain = [], [], [], []
    plain_rate = {}
    for case, label in FIRST_REQUEST_CASES.items():
        for load in ("quiet", "hog"):
            e = found.get((case, load))
            if e is None:
                continue
            reqs = [e[f"request{i}"] for i in (1, 2, 3)]
            first = reqs[0]
            rows.append(
                (
                    label,
                    load,
                    *(f"{r['ratio']:.2f}x" for r in reqs),
                    f"{first['ttft_spec']:.2f} / {first['ttft_plain']:.2f} s",
                    f"{1000 * first['max_gap_spec']:.0f} / {1000 * first['max_gap_plain']:.0f}"
                    f" / {1000 * first['slowest_pass_spec']:.0f} ms",
                )
            )
            gap_over_pass += [
                r["max_gap_spec"] / r["slowest_pass_spec"]
                for r in reqs
                if r["slowest_pass_spec"] > 0
            ]
            later_spec += [r["ttft_spec"] for r in reqs[1:]]
            later_plain += [r["ttft_plain"] for r in reqs[1:]]
            if load == "quiet":
                plain_rate.setdefault(label.split(" ")[0] + " " + label.split(" ")[1], []).extend(
                    r["rate_plain"] for r in reqs
                )
    rates = ", ".join(f"{model} ~{median(v):.0f} tok/s" for model, v in plain_rate.items())
    out = [
        run.measured_line(),
        "",
        f"Plain decoding here, quiet: {rates}. A fresh `SpeculativeLlama` with a nonsense cost "
        "file planted (ignored with one warning), three greedy requests, alternating with plain "
        'llama-cpp-python; "hog": a CPU-burning process during the first request of both:',
        "",
    ]
    out += _table(
        (
            "case",
            "load",
            "request 1",
            "request 2",
            "request 3",
            "first request's TTFT (spec / plain)",
            "largest gap (spec / plain / slowest spec pass)",
        ),
        rows,
    )
    out.append("")
    if gap_over_pass:
        out.append(
            "The largest gap between streamed tokens is "
            f"{_span(gap_over_pass, suffix='x')} the slowest target pass of the speculative "
            f"loop over all {len(gap_over_pass)} requests. Time to first token of later "
            f"requests: {_span(later_spec)} s speculative, {_span(later_plain)} s plain."
        )
    return out


# --- speculative generation against plain llama-cpp-python -----------------------------

GEN_MODEL = {"qwen": "Qwen 1.5B", "gemma": "Gemma 270M"}
GEN_DRAFT = {"lookup": "lookup", "qwen-0.5b": "0.5B draft"}
GEN_PROMPT = {"edit": "rename a variable", "free": "free text", "repeat": "repeated file"}


def _generation_label(name: str) -> str:
    """'bench_generation[qwen-lookup-edit-t0.0]' -> 'Qwen 1.5B, lookup, rename a variable, greedy'
    (bench_generation.GenCase.id; parsed, since importing the benchmark needs llama_cpp)."""
    match = re.fullmatch(r"bench_generation\[(\w+)-(.+)-(\w+)-t([\d.]+)\]", name)
    if not match:
        return name
    model, draft, prompt, temp = match.groups()
    return ", ".join(
        (
            GEN_MODEL.get(model, model),
            GEN_DRAFT.get(draft, draft),
            GEN_PROMPT.get(prompt, prompt),
            "greedy" if float(temp) == 0 else temp,
        )
    )


def generation(run: Run) -> list:
    cases = [b for b in run.named("bench_generation") if "ratio" in b["extra_info"]]
    if not cases:
        raise MissingResults(f"{run.path}: no bench_generation results")
    rows, realised_predicted, realised_accounted = [], [], []
    for b in cases:
        e = b["extra_info"]
        worst = f" ({e['worst_seed_ratio']:.2f}x)" if len(e.get("seeds", ())) > 1 else ""
        rows.append(
            (
                _generation_label(b["name"]),
                f"{e['plain_tok_s']:.1f}",
                f"{e['spec_tok_s']:.1f}",
                f"{e['ratio']:.2f}x{worst}",
                f"{100 * e['acceptance']:.0f}%",
                f"{e['ratio'] / e['predicted_speedup']:.2f}",
            )
        )
        realised_predicted.append(e["ratio"] / e["predicted_speedup"])
        realised_accounted.append(e["ratio"] / e["accounted_speedup"])
    out = [
        run.measured_line(),
        "",
        "Same prompts, plain and speculative alternating in one run, generation tokens/s after "
        "the prompt; sampled cases run three seeds in every round, and the worst seed's own "
        "ratio is given beside the overall one:",
        "",
    ]
    out += _table(
        (
            "model, drafter, prompt, temperature",
            "plain tok/s",
            "speculative",
            "ratio (worst seed)",
            "acceptance",
            "realised / predicted",
        ),
        rows,
    )
    out += [
        "",
        f"Realised / predicted (the cost model's speedup from the measured acceptance, "
        f"summed over the draft lengths used) is {_span(realised_predicted)}; realised / "
        f'"accounted" (the cost model\'s costs for the rounds that actually ran, no '
        f"acceptance model) is {_span(realised_accounted)}.",
    ]
    ttft = [b["extra_info"] for b in run.named("bench_time_to_first_token_and_memory")]
    if ttft and "ttft_ratio" in ttft[0]:
        e = ttft[0]
        out.append(
            f"Time to first token on a {e['prompt_tokens']}-token prompt: "
            f"{e['ttft_ratio']['lookup']:.3f}x plain with lookup, "
            f"{e['ttft_ratio']['draft']:.3f}x with the 0.5B draft; peak RSS with lookup "
            f"{e['peak_rss_delta_mib']['lookup']:+.0f} MiB against plain's "
            f"{e['peak_rss_mib']['plain']:.0f} MiB, with the 0.5B draft "
            f"{e['peak_rss_delta_mib']['draft']:+.0f} MiB (its own weights and cache)."
        )
    return out


# section name -> (suites whose JSON can supply it, first found wins; renderer)
# --- structured output: the same grammar, speculative against plain --------------------

GRAMMAR_CASES = {
    "qwen-extract": "Qwen 1.5B, JSON schema, extract 4 people from the prompt",
    "qwen-free": "Qwen 1.5B, JSON mode, free JSON",
    "gemma-extract": "Gemma 270M, JSON schema, extract 4 people from the prompt",
    "gemma-free": "Gemma 270M, JSON mode, free JSON",
}


def grammar_table(run: Run) -> list:
    rows = []
    for case, label in GRAMMAR_CASES.items():
        e = run.one(f"bench_grammar_generation[{case}]")["extra_info"]
        rows.append(
            (
                label,
                f"{e['plain_tok_s']:.1f}",
                f"{e['spec_tok_s']:.1f}",
                f"{e['ratio']:.2f}x",
                f"{100 * e['acceptance']:.0f}%"
                + (
                    f" ({e['verify_steps']} of {e['verify_steps'] + e['plain_steps']} rounds)"
                    if "verify_steps" in e
                    else ""
                ),
                f"{e['grammar_us_per_row'] / 1e3:.2f} ms",
                f"{e['whole_vocab_pass_us'] / 1e3:.0f} ms",
                "yes" if e["same_text"] else "no",
            )
        )
    return (
        [
            run.measured_line(),
            "",
            "Plain llama-cpp-python and `SpeculativeLlama` (prompt lookup) with the same grammar, "
            "greedy, alternating in one run, generation tokens/s after the first token; the "
            "grammar's cost per verify row in pyspec (the walk down the row) beside one "
            "whole-vocabulary grammar pass, which plain pays for every token:",
            "",
        ]
        + _table(
            (
                "request",
                "plain tok/s",
                "speculative tok/s",
                "ratio",
                "acceptance",
                "grammar per row",
                "whole-vocabulary pass",
                "same text",
            ),
            rows,
        )
        + [
            "",
            "Most of the gain is the grammar's cost: plain llama-cpp-python checks every "
            "vocabulary entry against the grammar for every token (the whole-vocabulary pass), "
            "pyspec a few hundred per row; the rest is speculation, where the lookup's drafts "
            "pass (the cost model drafts only where they pay, so acceptance may rest on a few "
            'rounds). "same text: no": the greedy texts parted, which the tests allow only at '
            "a near-tie of the logits (batched logits differ slightly from one-token ones).",
        ]
    )


# --- in-graph sampling against the host path ----------------------------------------------

GRAPH_MODELS = {"gemma": "Gemma 270M", "qwen": "Qwen 1.5B"}


def graph_table(run: Run) -> list:
    rounds = [b["extra_info"] for b in run.named("bench_graph_round")]
    if not rounds:
        raise MissingResults(f"{run.path}: no bench_graph_round results")
    out = [
        run.measured_line(),
        "",
        "One verify round (k drafts, k + 1 rows), host against graph, medians of 12 pairs "
        "alternating in one run: the whole round (decode to tokens in Python) and, in "
        "brackets, what follows the decode call (the host's verify pass over llama.cpp's "
        "rows; the graph's read of one token per row):",
        "",
    ]
    table = []
    for e in sorted(rounds, key=lambda e: (e["model"], e["params"], e["k"])):
        table.append(
            (
                GRAPH_MODELS.get(e["model"], e["model"]),
                e["params"],
                str(e["k"]),
                f"{e['host_round_ms']:.1f} ms ({e['host_after_decode_ms']:.2f})",
                f"{e['graph_round_ms']:.1f} ms ({e['graph_after_decode_ms']:.2f})",
                f"{e['round_ratio']:.3f}x",
            )
        )
    out += _table(("model", "sampling", "k", "host round", "graph round", "graph / host"), table)
    generation = [b["extra_info"] for b in run.named("bench_graph_generation")]
    if generation:
        out += [
            "",
            "Whole generations with prompt lookup (a base model continuing a file that "
            "repeats an earlier one, 128 tokens, medians of 3 alternating rounds after a "
            "warm-up), generation tokens/s after the first token:",
            "",
        ]
        out += _table(
            ("model", "sampling", "host tok/s", "graph tok/s", "graph / host"),
            [
                (
                    GRAPH_MODELS.get(e["model"], e["model"]),
                    e["params"],
                    f"{e['host_tok_s']:.1f}",
                    f"{e['graph_tok_s']:.1f}",
                    f"{e['ratio']:.3f}x",
                )
                for e in sorted(generation, key=lambda e: (e["model"], e["params"]))
            ],
        )
    plain = [b["extra_info"] for b in run.named("bench_graph_plain_path")]
    if plain and "host_pair_ratio" in plain[0]:
        e0 = plain[0]
        out += [
            "",
            "The loop without drafts (`draft_max=0`: one token per decode) against "
            "llama.cpp's own `llama-bench` built from the same sources with the same flags "
            f"(2 threads, 128 tokens, flash attention off on both, a context of "
            f"{e0['n_ctx']} tokens for the loop, {e0['rounds']} alternating rounds); tokens/s "
            "are medians, ratios the median of each round's own ratio:",
            "",
        ]
        out += _table(
            ("model", "llama-bench tok/s", "host path", "graph path"),
            [
                (
                    GRAPH_MODELS.get(e["model"], e["model"]),
                    f"{e['llama_bench_tok_s']:.1f}",
                    f"{e['host_tok_s']:.1f} ({e['host_pair_ratio']:.3f}x)",
                    f"{e['graph_tok_s']:.1f} ({e['graph_pair_ratio']:.3f}x)",
                )
                for e in sorted(plain, key=lambda e: e["model"])
            ],
        )
    return out


# --- completion logprobs: llama-cpp-python's own against pyspec's ---------------------------


def logprobs_table(run: Run) -> list:
    rows = [b["extra_info"] for b in run.named("bench_completion_logprobs")]
    if not rows:
        raise MissingResults(f"{run.path}: no bench_completion_logprobs results")
    e0 = rows[0]
    out = [
        run.measured_line(),
        "",
        f"One greedy completion of {e0['max_tokens']} tokens with `logprobs={e0['n_top']}`, "
        f"every side decoding one token per call, medians of {e0['rounds']} alternating "
        "rounds in one run (the same text everywhere). llama-cpp-python needs "
        "`logits_all=True` and sorts each emitted token's whole row in Python; pyspec "
        "records each token's logprob and top n as it decodes:",
        "",
    ]
    out += _table(
        (
            "model",
            "llama-cpp-python",
            "pyspec host",
            "pyspec graph",
            "pyspec, no logprobs",
            "speed-up (host)",
        ),
        [
            (
                GRAPH_MODELS.get(e["model"], e["model"]),
                f"{e['llama-cpp-python_s']:.2f} s",
                f"{e['pyspec host_s']:.2f} s",
                f"{e['pyspec graph_s']:.2f} s",
                f"{e['pyspec, no logprobs_s']:.2f} s",
                f"{e['llama-cpp-python_s'] / e['pyspec host_s']:.0f}x",
            )
            for e in sorted(rows, key=lambda e: e["model"])
        ],
    )
    return out


# --- llama-cpp-python builds: AMX against non-AMX (bench_llama_builds.py) -----------------


def llama_builds_table(run: Run) -> list:
    rows = [b["extra_info"] for b in run.named("bench_batch_costs_amx_against_no_amx")]
    if not rows:
        raise MissingResults(f"{run.path}: no bench_batch_costs_amx_against_no_amx results")
    sizes = [n for n in rows[0]["ms"]["amx"] if n != "plain"]
    out = [
        run.measured_line(),
        "",
        f"Milliseconds per `llama_decode` of n tokens (every row's logits kept, as a verify "
        f"pass keeps them) and per token of plain one-token decoding, 2 threads, each build "
        f"in its own process, the builds alternating, medians of {rows[0]['rounds']} rounds:",
        "",
    ]
    table = []
    for e in sorted(rows, key=lambda e: e["model"], reverse=True):
        for label in ("no-amx", "amx"):
            ms = e["ms"][label]
            table.append(
                (
                    e["model"],
                    "AMX + fix" if label == "amx" else "without AMX",
                    *(f"{ms[n]:.0f}" for n in sizes),
                    f"{ms['plain']:.1f}",
                    f"{ms[sizes[-1]] / ms['1']:.2f}x",
                )
            )
        r = e["amx_over_no_amx"]
        table.append(
            (e["model"], "AMX / without", *(f"{r[n]:.2f}" for n in sizes), f"{r['plain']:.2f}", "")
        )
    out += _table(
        (
            "model",
            "build",
            *(f"n={n}" for n in sizes),
            "plain ms/token",
            f"cost({sizes[-1]}) / cost(1)",
        ),
        table,
    )
    return out


# --- a costly drafter against plain decoding (bench_costly_drafter.py) --------------------


def costly_drafter_table(run: Run) -> list:
    b = run.one("bench_costly_drafter_never_loses")
    e = b["extra_info"]
    out = [
        run.measured_line(),
        "",
        f"Qwen2.5-Coder 1.5B, {e['max_tokens']} greedy tokens per request, decode tokens/s "
        "after the first token, each request run plain, with the 0.5B draft model and with "
        "prompt lookup, then in the opposite order "
        f"(A B C C B A, medians of {e.get('runs', 2)} runs); "
        "the objects live "
        "through the run, the cost cache off (a fresh machine):",
        "",
    ]
    rows, ratios = [], {"draft model": [], "lookup": []}
    for name, r in e["requests"].items():
        rate = r["rate"]
        for m in ratios:
            ratios[m].append(r["over_plain"][m])
        rows.append(
            (
                name,
                f"{rate['plain']:.2f}",
                *(f"{rate[m]:.2f} ({r['over_plain'][m]:.2f}x)" for m in ratios),
            )
        )
    out += _table(("request", "plain tok/s", "draft model", "lookup"), rows)
    from math import exp, log

    out += [""] + [
        f"{m}: geometric mean {exp(sum(map(log, v)) / len(v)):.2f}x plain, worst {min(v):.2f}x."
        for m, v in ratios.items()
    ]
    return out


# --- free drafting against llama.cpp's C++ draftless modes (bench_draftless.py) ------------


def _whole_request_seconds(e: dict) -> dict:
    """Per workload and mode, the requests' whole-request seconds summed. The C++ modes' are
    worked out again from what the tool reported (``_cpp_request_time.request_seconds``), so a
    run kept before session 41, whose JSON charged a request that ended early the whole token
    limit, is shown by today's rule."""
    sums = {}
    for r in e["rows"]:
        per_mode = sums.setdefault(r["workload"], {})
        for m in e["modes"]:
            got = r[m]
            if m.startswith("c++ "):
                seconds = request_seconds(
                    got["prompt_seconds"], got["tokens"], got["rate"], e["max_tokens"]
                )
            else:
                seconds = got["seconds"]
            per_mode[m] = per_mode.get(m, 0.0) + seconds
    return sums


def _modes_table(e: dict) -> list:
    """One row per workload and mode of a bench_draftless run (its extra_info: the summary,
    and the rows the whole-request seconds are worked out from): decode tok/s, its ratio to
    plain, whole-request seconds, acceptance."""
    summary, modes = e["summary"], e["modes"]
    seconds = _whole_request_seconds(e)
    rows = [
        (
            f"{workload} ({s['requests']})",
            m,
            f"{s['rate'][m]:.2f}",
            f"{s['rate'][m] / s['rate']['plain']:.2f}x",
            f"{seconds[workload][m]:.1f}",
            f"{100 * s['acceptance'][m]:.0f}%" if m != "plain" else "",
        )
        for workload, s in summary.items()
        for m in modes
    ]
    header = ("workload (requests)", "mode", "decode tok/s", "over plain", "seconds", "accepted")
    return _table(header, rows)


def _huge_pages_sentence(e: dict) -> str:
    """What the run recorded of pyspec's objects' 2 MB pages (recorded since session 42;
    plain llama-cpp-python and the C++ tools allocate as llama.cpp does)."""
    pages = e.get("huge_pages")
    if not pages:
        return ""
    mib = {name: p["bytes"] >> 20 for name, p in pages.items()}
    # One figure only where it hides nothing: no object short of it, none with a reason.
    if (
        all(mib.values())
        and len(set(mib.values())) == 1
        and not any(p["why_not"] for p in pages.values())
    ):
        return (
            f" Each of pyspec's {len(pages)} objects had its weights in 2 MB pages "
            f"({next(iter(mib.values()))} MiB)."
        )
    return (
        " pyspec's objects' weights in 2 MB pages: "
        + "; ".join(
            f"{name} {mib[name]} MiB" + (f" ({p['why_not']})" if p["why_not"] else "")
            for name, p in pages.items()
        )
        + "."
    )


def draftless_table(run: Run) -> list:
    e = run.one("bench_draftless_modes")["extra_info"]
    modes = e["modes"]
    out = [
        run.measured_line(),
        "",
        f"Qwen2.5-Coder 1.5B, {e['threads']} threads, {e['max_tokens']} greedy tokens per request, "
        "flash attention on (llama.cpp's default; llama-cpp-python's needs `flash_attn=True`), "
        "the same prompt text everywhere; decode tokens/s (geometric mean over the requests; "
        "pyspec: after the first token, llama.cpp: as `llama-speculative-simple` reports it) "
        "and whole-request seconds (prompt + decode, summed; llama.cpp's tool decodes past "
        "the token limit to the end of its last accepted draft, so its time is its prompt plus "
        "the limit at its rate, or its decode time where it stopped before the limit"
        + (
            "; its rate covers those extra tokens, so pyspec's is also taken over as many "
            "tokens, below"
            + (
                ", from a second lookup object of the same setup, alive through the run, asked "
                "for as many tokens as the request's best C++ mode decoded). pyspec's modes are "
                "asked for the request's tokens as `create_completion(max_tokens=...)` asks "
                "the loop, so no draft is verified past them. pyspec"
                if any("same_tokens_run" in r.get("lookup", {}) for r in e["rows"])
                else "). pyspec"
            )
            + "'s lookup starts from batch costs measured at every draft "
            "length (`SpeculativeLlama.calibrate`, as `pyspec generate` and `serve` do once per "
            "model and setup; not timed here). "
            if any(m in modes for m in OTHER_LOOKUPS)
            else "). "
        )
        + "`llama-bench` tg, llama.cpp's "
        f"plain decode on this build from an empty context: {e['llama_bench_tg']:.2f} tok/s "
        f"(the requests decode after prompts of {min(r['prompt_tokens'] for r in e['rows'])}-"
        f"{max(r['prompt_tokens'] for r in e['rows'])} tokens, which costs more per token; "
        "the plain stretch in docs/drafting.md compares at the same depth)."
        + (
            f" The chats are the {sum(r['workload'] == 'chat' for r in e['rows'])} ShareGPT "
            f"conversations after the file's first {e['chats_after']} that qualify "
            "(`PYSPEC_BENCH_CHATS_AFTER`): held out, no rule was chosen on them."
            if e.get("chats_after")
            else ""
        )
        + (
            f" The multi-turn chats are {e['multi_turn_conversations']} ShareGPT conversations "
            "answered turn by turn, each human turn a request whose history holds the model's "
            "own greedy answers (`PYSPEC_BENCH_MULTI_TURN`, benchmarks/_own_answers.py). "
            "Their whole-request seconds are not the loops' alone: llama-cpp-python keeps the "
            "earlier turns in its KV cache from one request to the next, and the C++ tool, a "
            "process per request, reads the whole history again."
            if e.get("multi_turn_conversations")
            else ""
        )
        + _huge_pages_sentence(e),
        "",
    ]
    out += _modes_table(e)
    out.append("")
    for workload, s in e["summary"].items():
        best = max((m for m in modes if m.startswith("c++")), key=lambda m: s["rate"][m])
        mine = [r for r in e["rows"] if r["workload"] == workload]
        out.append(
            f"- {workload}: pyspec's lookup {s['rate']['lookup'] / s['rate'][best]:.2f}x "
            f"llama.cpp's best draftless mode ({best[4:]}) by the geometric means"
            + _against_one_mode(mine, best)
            + f", {s['lookup_over_best_cpp']:.2f}x per request against each request's best"
            + (
                f" ({s['lookup_over_best_cpp_same_tokens']:.2f}x with pyspec's rate taken over "
                "as many tokens as that mode decoded)"
                if s.get("lookup_over_best_cpp_same_tokens")
                else ""
            )
            + f"; before the suffix index {s['rate']['lookup before'] / s['rate'][best]:.2f}x; "
            f"memory of earlier requests: {100 * s['memory_hit_rate']:.0f}% of its lookups hit"
            + _against_other_lookup(s, best)
        )
    return out


def draftless_runs(run: Run) -> list:
    """Every kept run of bench_draftless (docs/results/draftless*.json: the README's and those
    of other CPUs, builds and sessions), a row each: when, on what, the commit, and per
    workload pyspec's lookup over the best C++ draftless mode by the geometric means (that
    mode named) and over plain. So the goal's standing on every CPU reads off one table."""
    runs = sorted(
        (load_run(path.stem, path.parent) for path in run.path.parent.glob("draftless*.json")),
        key=lambda r: r.data.get("datetime", ""),
    )
    rows, threads = [], set()
    for kept in runs:
        e = kept.one("bench_draftless_modes")["extra_info"]
        threads.add(e["threads"])
        cells = []
        for workload in ("chat", "code edits", "multi-turn chat"):
            s = e["summary"].get(workload)
            if s is None:
                cells.append("")
                continue
            best = max((m for m in e["modes"] if m.startswith("c++")), key=lambda m: s["rate"][m])
            cells.append(
                f"{s['rate']['lookup'] / s['rate'][best]:.2f}x {best[4:]} "
                f"({s['rate']['lookup'] / s['rate']['plain']:.2f}x plain; {s['requests']})"
            )
        # "; llama.cpp built for AVX2 only (...)", "; transparent huge pages always (...)"
        build = kernels(kept.data) + huge_pages_setting(kept.data)
        rows.append(
            (
                kept.data.get("datetime", "?")[:10],
                machine(kept.data) + build,
                kept.data.get("commit_info", {}).get("id", "?")[:7],
                *cells,
                f"`{kept.where}`"
                + (" (the README's)" if kept.path.stem == run.path.stem else "")
                + (
                    f" (the {e['chats_after']} chats after the usual)"
                    if e.get("chats_after")
                    else ""
                ),
            )
        )
    header = (
        "measured",
        "CPU",
        "commit",
        "chats: lookup / best C++ mode",
        "edits",
        "multi-turn chats, own answers",
        "JSON",
    )
    return [
        "Every kept run of `pyspec bench draftless` "
        f"({'/'.join(str(t) for t in sorted(threads))} threads, Qwen2.5-Coder 1.5B, 96 greedy "
        "tokens, the ShareGPT chats and the five code edits): pyspec's lookup over llama.cpp's "
        "best draftless mode on that run by the geometric means, over plain "
        "llama-cpp-python, and the requests; the multi-turn chats answer each human turn "
        "with the model's own answers as history (`PYSPEC_BENCH_MULTI_TURN`). Each run's "
        "full table, and what it changed, is in docs/draftless-runs.md.",
        "",
        *_table(header, rows),
    ]


def _against_one_mode(rows: list, mode: str) -> str:
    """pyspec's lookup against one C++ mode request by request, over the tokens that mode
    decoded: each request's best of five C++ runs is also the luckiest of five noisy ones
    (requests where no mode drafted anything spread by up to 28% between the modes)."""
    pairs = [
        (r["lookup"]["rate_at_cpp"][mode], r[mode]["rate"])
        for r in rows
        for twin in [r["lookup"].get("same_tokens_run")]
        # only where pyspec was asked for, and decoded, exactly the tokens that mode decoded
        if twin is not None and twin["asked"] == twin["decoded"] == r[mode]["tokens"]
        if r[mode]["rate"] > 0 and r["lookup"]["rate_at_cpp"].get(mode, 0) > 0
    ]
    if not pairs:
        return ""
    ratio = math.exp(sum(math.log(a / b) for a, b in pairs) / len(pairs))
    return (
        f" and {ratio:.2f}x per request against it over the tokens it decoded "
        f"({len(pairs)} of {len(rows)} requests: those where pyspec's second object was asked "
        "for as many)"
    )


# The lookup variants bench_draftless has run beside the lookup (all calibrated but the last).
OTHER_LOOKUPS = (
    "lookup of session 36",
    "lookup, reproduction rule off",
    "lookup, remembered-copy rule off",
    "lookup, sure-copy rule off",
    "lookup, unsure rule off",
    "lookup up to 32",
    "lookup uncalibrated",
)


# The rules whose "off" variant ran beside the lookup: the reproduction rule (session 36),
# the remembered-copy rule (sessions 33-35), the sure-copy rule (sessions 22-32), the
# unsure rule (session 21).
RULES_RUN_OFF = ("reproduction", "remembered-copy", "sure-copy", "unsure")


def _against_other_lookup(s: dict, best: str) -> str:
    """The lookup against the variant that ran beside it: session 36's lookup (session 37
    on), one rule off (RULES_RUN_OFF), drafts up to 32 (sessions 18-20), or no calibration
    (session 17's run)."""
    rate = s["rate"]
    before = rate.get("lookup of session 36")
    if before:
        return (
            "; the lookup of session 36 (no edit request read, the reproduction rule and the "
            "finish plan off) "
            f"{before:.2f} tok/s against {rate['lookup']:.2f} "
            f"({rate['lookup'] / before:.3f}x)."
        )
    for rule in RULES_RUN_OFF:
        off = rate.get(f"lookup, {rule} rule off")
        if off:
            return (
                f"; with the {rule} rule off (the default before) {off:.2f} tok/s against "
                f"{rate['lookup']:.2f} ({rate['lookup'] / off:.3f}x)."
            )
    if "lookup up to 32" in rate and "lookup up to 32" not in s["rate_at_cpp"]:
        return (
            f"; with drafts up to 32 (the default before) {rate['lookup up to 32']:.2f} tok/s "
            f"against {rate['lookup']:.2f}."
        )
    if "lookup up to 32" in rate:  # runs before session 20: both over the C++ tokens
        same = s["rate_at_cpp"]
        return (
            f"; with drafts up to 32 (the default before) {rate['lookup up to 32']:.2f} tok/s "
            f"against {rate['lookup']:.2f} (over the tokens {best[4:]} decoded: "
            f"{same['lookup up to 32'][best]:.2f} against {same['lookup'][best]:.2f})."
        )
    if "lookup uncalibrated" in rate:
        return (
            f"; without the calibrated batch costs {rate['lookup uncalibrated']:.2f} "
            f"tok/s against {rate['lookup']:.2f}."
        )
    return "."


# --- the combined drafters against llama.cpp's draft-simple (bench_draft_peer.py) ---------


def draft_peer_table(run: Run) -> list:
    e = run.one("bench_draft_model_peer")["extra_info"]
    out = [
        run.measured_line(),
        "",
        f"Qwen2.5-Coder 1.5B with the 0.5B draft, {e['threads']} threads, {e['max_tokens']} "
        "greedy tokens per request, flash attention on, the same prompt text everywhere; decode "
        "tokens/s (geometric mean over the requests) and whole-request seconds, as in the "
        "draftless table:",
        "",
    ]
    out += _modes_table(e)
    out.append("")
    for workload, s in e["summary"].items():
        out.append(
            f"- {workload}: pyspec's lookup + draft model "
            f"{s['rate']['lookup + draft model'] / s['rate']['c++ draft-simple']:.2f}x llama.cpp's "
            f"draft-simple by the geometric means ({s['pyspec_over_cpp']:.2f}x per request"
            + (
                f", {s['pyspec_over_cpp_same_tokens']:.2f}x with pyspec's rate over as many "
                "tokens as the C++ tool decoded"
                if "pyspec_over_cpp_same_tokens" in s
                else ""
            )
            + f"); {s['costly_steps']} of its verify rounds drafted by the draft model."
        )
    return out


# --- the draft model at fixed draft lengths against plain (bench_draft_lengths.py) -------


def draft_lengths_table(run: Run) -> list:
    e = run.one("bench_draft_lengths")["extra_info"]
    s = e["summary"]["chat"]
    rows = []
    for m in e["modes"]:
        speculative = m != "plain"
        rows.append(
            (
                m,
                f"{s['rate'][m]:.2f}",
                f"{s['over_plain'][m]:.2f}x",
                f"{100 * s['acceptance'][m]:.0f}%" if speculative else "",
                f"{s['tokens_per_round'][m]:.2f}" if speculative else "1",
                f"{s['verify_over_plain'][m]:.2f}" if speculative else "",
                f"{s['draft_token_over_plain'][m]:.2f}" if speculative else "",
                f"{s['draft_prompt_seconds'][m]:.2f}" if speculative else "",
            )
        )
    n = s["requests"]
    # A request that ends after a token or two is decoded in one round, which the draft
    # model's prompt pass fills: its rate says nothing of what drafting costs per token.
    long = [r for r in e["rows"] if r["plain"]["tokens"] >= 8]
    short = [f"{r['id']} ({r['plain']['tokens']} tokens)" for r in e["rows"] if r not in long]

    def over_plain(m: str) -> float:
        return math.exp(statistics.fmean(math.log(r[m]["rate"] / r["plain"]["rate"]) for r in long))

    without = ", ".join(f"{m} {over_plain(m):.2f}x" for m in e["modes"] if m != "plain")
    note = (
        [
            "",
            f"- Without the requests that ended within 8 tokens ({', '.join(short)}), over "
            f"plain: {without}.",
        ]
        if short and long
        else []
    )
    return [
        run.measured_line(),
        "",
        f"Qwen2.5-Coder 1.5B with the 0.5B draft, {e['threads']} threads, {n} ShareGPT chats, "
        f"{e['max_tokens']} greedy tokens, flash attention on; the draft model drafts k tokens "
        "every round (`adaptive=False, draft_min=k, draft_max=k`) and the target verifies them "
        "in one pass; decode tok/s and its ratio to plain llama-cpp-python are geometric "
        "means over the requests (they include the draft model's own pass over the prompt, "
        "in the first round, given apart); a round's verify pass and a drafted token (without "
        "that pass) are given in plain llama-cpp-python's time per token in the same "
        "requests:",
        "",
        *_table(
            (
                "mode",
                "decode tok/s",
                "over plain",
                "accepted",
                "tokens per round",
                "verify pass / plain token",
                "drafted token / plain token",
                "draft's prompt pass (s per request)",
            ),
            rows,
        ),
        *note,
    ]


# --- pyspec serve against llama.cpp's llama-server, openai client (bench_server_chats.py) --


def _undrafted(e: dict, workload: str, best: str) -> dict | None:
    """Over the requests of ``workload`` where llama-server's ``best`` mode drafted nothing:
    how many, and the geometric mean rates of that mode, of plain llama-server and of
    pyspec serve without drafts (None where the run has no such request or row). The mode's
    server is another process than plain llama-server's, and two llama-server processes
    decode at different speeds with their weights in 4 KB pages (by how fragmented free
    memory was when each loaded: docs/generation.md), so its drafts' gain over plain
    llama-server needs this to be read."""
    need = (best, "llama-server", "pyspec serve, no drafts")
    rows = [
        r
        for r in e["rows"]
        if r["workload"] == workload
        and all(m in r["modes"] for m in need)
        and r["modes"][best]["drafted"] == 0  # (None: the server did not say)
        and all(r["modes"][m]["rate"] > 0 for m in need)
    ]
    if not rows:
        return None

    def gm(mode: str) -> float:
        return math.exp(statistics.fmean(math.log(r["modes"][mode]["rate"]) for r in rows))

    return {"requests": len(rows), **{m: gm(m) for m in need}}


def _gain_figures(e: dict, workload: str) -> dict | None:
    """Each server's drafts against its own decoding on ``workload``: ``mine``, pyspec serve
    over its row without drafts; ``theirs``, llama-server's best mode over plain
    llama-server; and where that mode drafted nothing on some requests (``_undrafted``,
    ``idle``), ``ahead``, how much faster its process decoded there, and ``own``, its drafts'
    gain over its own decoding by that estimate. None where the run lacks the rows."""
    s = e["summary"][workload]
    modes, best = s["modes"], s.get("best_cpp")
    if not best or "pyspec serve, no drafts" not in modes or "llama-server" not in modes:
        return None
    theirs = modes[best]["rate"] / modes["llama-server"]["rate"]
    figures = {
        "best": best,
        "short": best.removeprefix("llama-server "),
        "mine": modes["pyspec serve"]["rate"] / modes["pyspec serve, no drafts"]["rate"],
        "theirs": theirs,
        "idle": _undrafted(e, workload, best),
    }
    if figures["idle"]:
        idle = figures["idle"]
        figures["ahead"] = idle[best] / idle["llama-server"]
        figures["own"] = theirs / figures["ahead"]
    return figures


def _draft_gains(e: dict, workload: str) -> str:
    """What each server's drafts gain over its own decoding, on ``workload`` (empty where
    the run has no ``pyspec serve, no drafts`` row)."""
    g = _gain_figures(e, workload)
    if g is None:
        return ""
    text = (
        f"{workload}: pyspec serve with drafts ran {g['mine']:.2f}x its own row without "
        f"drafts, `{g['short']}` {g['theirs']:.2f}x plain llama-server"
    )
    idle = g["idle"]
    if idle:
        text += (
            f"; but on the {idle['requests']} requests where `{g['short']}` drafted nothing "
            f"its process already ran {g['ahead']:.2f}x plain llama-server's "
            f"({idle[g['best']]:.2f} against {idle['llama-server']:.2f} tok/s; pyspec serve "
            f"without drafts {idle['pyspec serve, no drafts']:.2f} there), so by that "
            f"estimate its drafts gained about {g['own']:.2f}x over its own decoding"
        )
    return text


def server_chats_table(run: Run) -> list:
    e = run.one("bench_server_chats")["extra_info"]
    summary = e["summary"]
    workloads = list(summary)

    def cells(workload, mode):
        m = summary[workload]["modes"][mode]
        acceptance = "" if m["acceptance"] is None else f"{100 * m['acceptance']:.0f}%"
        return [f"{m['rate']:.2f}", f"{m['over_plain']:.2f}x", f"{m['seconds']:.1f}", acceptance]

    header = ["server"]
    for w in workloads:
        n = summary[w]["requests"]
        header += [
            f"{w} ({n}): decode tok/s",
            "over plain",
            "whole requests (s)",
            "accepted",
        ]
    rows = [[f"`{mode}`"] + sum((cells(w, mode) for w in workloads), []) for mode in e["modes"]]
    lead = []
    for w in workloads:
        s = summary[w]
        if s.get("best_cpp"):
            lead.append(
                f"{w}: {s['pyspec_over_best_cpp']:.2f}x llama-server's best `--spec-type` there "
                f"(`{s['best_cpp'].removeprefix('llama-server ')}`)"
            )
    memory = e.get("pyspec_memory") or {}
    lookups = memory.get("memory_lookups_total") or 0
    remembered = (
        f" Its memory of earlier requests answered {memory['memory_hits_total']:.0f} of "
        f"{lookups:.0f} lookups ({100 * memory['memory_hits_total'] / lookups:.0f}%) and held "
        f"{memory['memory_tokens']:.0f} tokens at the end."
        if lookups
        else ""
    )
    same = ", ".join(
        f"{w} {summary[w]['modes']['pyspec serve']['same_text_as_plain']}/{summary[w]['requests']}"
        for w in workloads
    )
    gains = [g for g in (_draft_gains(e, w) for w in workloads) if g]
    if gains:
        gains = [
            "",
            "What the drafts gain, each server over its own decoding: " + "; ".join(gains) + ".",
        ]
    return [
        run.measured_line(),
        "",
        f"Qwen2.5-Coder 1.5B on every server, {e['threads']} threads, a context of "
        f"{e['n_ctx']}, one slot, flash attention on, all servers up at once on one machine "
        "(one works at a time); llama-server built from the llama.cpp sources vendored in "
        "llama-cpp-python with the wheel's own CMake flags, each `--spec-type` at its "
        f"defaults; {e['conversations']} ShareGPT conversations answered turn by turn (the "
        "history holds the model's own greedy answers, the same messages for every server), "
        f"then the five code edits; {e['max_tokens']} greedy tokens a request (no repeat "
        "penalty: llama_cpp.server's default is 1.1, llama-server's 1.0), streamed, each "
        "request sent to every server in a rotating order. Decode tok/s after the first "
        "streamed token on the `openai` client's clock (geometric mean over the requests; "
        "tokens: the answer text's, in the model's vocabulary), its ratio to plain "
        "llama-cpp-python (`python -m llama_cpp.server --logits_all false --flash_attn "
        "true`; geometric mean of the per-request ratios), whole-request seconds summed "
        "(sent to last chunk, prompt included), and the drafted tokens accepted:",
        "",
        *_table(header, rows),
        "",
        f"`pyspec serve`: {'; '.join(lead)}.{remembered} Its answers were plain "
        f"llama-cpp-python's text in {same} requests (greedy: the batched verify's logits "
        "differ slightly from one-token ones, so a text may part at a near-tie).",
        *gains,
    ]


def server_chats_line(run: Run) -> list:
    """The README's sentence for the server comparison (the table is in docs/serving.md)."""
    e = run.one("bench_server_chats")["extra_info"]
    parts = []
    for workload, s in e["summary"].items():
        modes = s["modes"]
        mine = modes["pyspec serve"]
        part = f"{workload} ({s['requests']} requests) {mine['rate']:.1f} tok/s"
        if s.get("best_cpp"):
            best = s["best_cpp"]
            part += (
                f", {s['pyspec_over_best_cpp']:.2f}x llama-server's best `--spec-type` "
                f"(`{best.removeprefix('llama-server ')}`)"
            )
            g = _gain_figures(e, workload)
            if g is not None:
                part += (
                    f" (drafting over each server's own plain decoding: pyspec "
                    f"{g['mine']:.2f}x, llama-server {g['theirs']:.2f}x"
                )
                if g["idle"]:
                    part += (
                        f", or about {g['own']:.2f}x over its own decoding: `{g['short']}` ran "
                        f"{g['ahead']:.2f}x plain llama-server on the {g['idle']['requests']} "
                        "requests where it drafted nothing"
                    )
                part += ")"
        parts.append(part + f" and {mine['over_plain']:.2f}x plain `llama_cpp.server`")
    return [
        f"{run.measured_line()} `pyspec serve` against llama.cpp's own `llama-server` (plain "
        "and each draftless `--spec-type`, built from the same sources with the same flags) "
        f"and plain `llama_cpp.server`, Qwen2.5-Coder 1.5B, {e['conversations']} ShareGPT "
        "conversations answered turn by turn and the five code edits, streamed through the "
        f"`openai` client, decode tok/s after the first token: {'; '.join(parts)}. Part of "
        "the lead is pyspec serve's plain decoding, not its drafts: its weights in 2 MB pages "
        "(llama-server's in 4 KB pages) and its one decoding thread, where plain "
        "`llama_cpp.server` decodes on several ([docs/serving.md](docs/serving.md), "
        '"Against llama.cpp\'s own server").'
    ]


# --- chains against trees of drafts, in measured batch costs (bench_tree_outlook.py) -----


def _short_curve(name: str) -> str:
    """A batch curve's name (bench_slow_start.curves) short enough for a table cell."""
    machine, _, source = name.partition(", calibrated by ")
    machine = (
        machine.replace("Intel(R) Xeon(R) Processor", "Xeon")
        .replace(", 2 CPUs", "")
        .replace(
            ", AVX-512, AMX; llama.cpp built for AVX2 only (without AMX, AVX-512)", ", AVX2 build"
        )
    )
    if source:
        return f"{machine}, calibrated live {source.rsplit(' ', 1)[-1]}"
    if name == "Xeon AMX build":
        return "Xeon (family 6, model 207), AMX build, measured"
    return f"{machine}, measured"


def tree_outlook_table(run: Run) -> list:
    e = run.one("bench_tree_outlook")["extra_info"]
    placements = e["placements"]
    root, bound = placements[-2], placements[-1]  # the longest root branch, the bound
    out = [
        run.measured_line(),
        "",
        "Qwen2.5-Coder 1.5B, 96 tokens per request, 24 ShareGPT chats and the 5 code edits in "
        "bench_draftless's order; the loop replayed as it runs by default (the lookup with its "
        f"memory, the cost model from a calibrated curve, the rules: {e['rules']}) with "
        "chains, with a second branch at the root (the runner-up continuation after the "
        "context's longest earlier match), and, as a bound no tree reaches, a branch placed at "
        "the very node where the chain is rejected. Speedup over plain decoding in each "
        "curve's costs (cost units: the figures do not depend on the machine that replayed "
        "them), geometric means over the requests; 'rescued' counts the rounds whose chain "
        "was rejected at the branch's node and whose branch began with the target's token.",
    ]
    for recording, by_curve in e["table"].items():
        rows = []
        for curve, by_workload in by_curve.items():
            for workload, s in by_workload.items():
                chains = s["chains"]
                rows.append(
                    (
                        _short_curve(curve),
                        f"{workload} ({chains['requests']})",
                        *(f"{s[p]['speedup']:.3f}x" for p in placements),
                        f"{s[root]['branch_rescues']} of {s[root]['branch_rejections']}",
                        f"{s[bound]['branch_rescues']} of {s[bound]['branch_rejections']}",
                    )
                )
        out += ["", f"{recording}:", ""]
        out += _table(
            (
                "batch curve",
                "workload (requests)",
                *placements,
                f"{root}: rescued",
                f"{bound}: rescued",
            ),
            rows,
        )
        gains = [
            s[p]["speedup"] / s["chains"]["speedup"]
            for by_workload in by_curve.values()
            for s in by_workload.values()
            for p in placements[1:-1]
        ]
        out += [
            "",
            f"- {recording}: the best root branch over chains, on any curve and workload: "
            f"{max(gains):.3f}x; the worst: {min(gains):.3f}x.",
        ]
    return out


# --- a plain stretch against llama.cpp's own decode (bench_plain_stretch.py) -------------


def plain_stretch(run: Run) -> list:
    e = run.one("bench_plain_stretch")["extra_info"]
    m, runs = e["median"], e["runs"]
    cpp = "llama-bench tg"

    def paired(mode):  # geometric mean of the per-round ratios, and +-2 standard errors
        logs = [math.log(a / b) for a, b in zip(runs[mode], runs[cpp])]
        mean = statistics.fmean(logs)
        half = 2 * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else 0.0
        return f"{math.exp(mean):.2f}x ({math.exp(mean - half):.2f}-{math.exp(mean + half):.2f})"

    lines = [
        run.measured_line(),
        "",
        f"Qwen2.5-Coder 1.5B, {e['threads']} threads, flash attention on, {e['max_tokens']} "
        f"greedy tokens after a {e['prompt_tokens']}-token chat prompt, {e['rounds']} "
        f"alternating rounds; decode tok/s (median) and the rate over `llama-bench` tg at the "
        "prompt's depth in the same round (geometric mean over the rounds, and the range of "
        "two standard errors):",
        "",
        "| mode | tok/s | over llama-bench tg |",
        "|---|---|---|",
    ]
    for mode in runs:
        ratio = "1.00x" if mode == cpp else paired(mode)
        lines.append(f"| {mode} | {m[mode]:.2f} | {ratio} |")
    if "loop_cost_median" in e:
        c = e["loop_cost_median"]
        lines += [
            "",
            f"pyspec's round, medians: the target's decode {c['target_ms_per_round']:.1f} ms, the "
            f"verifier {c['verify_ms_per_round']:.2f} ms, the rest of the loop "
            f"{c['loop_ms_per_round']:.2f} ms.",
        ]
    return lines


# --- records from outside pytest-benchmark (_take_records.py) -----------------------------


def llama_build(run: Run) -> list:
    d = run.data
    minutes, seconds = divmod(round(d["seconds"]), 60)
    return [
        run.measured_line(),
        "",
        f"`pyspec install-llama` built llama-cpp-python {d['version']} from an empty cache in "
        f"{minutes} min {seconds} s ({len(d['cmake_args'])} CMake flags; a second run with "
        "the same flags reuses the wheel).",
    ]


def test_run(run: Run) -> list:
    counts = run.data["counts"]
    parts = [
        f"{counts[k]} {k}"
        for k in ("passed", "skipped", "failed", "errors", "error")
        if counts.get(k)
    ]
    return [
        run.measured_line(),
        "",
        f"The whole suite (`cd tests && python3 -m pytest -q`): {', '.join(parts)} in "
        f"{run.data['seconds'] / 60:.0f} minutes. Without a GPU the CUDA tests skip, and so "
        "does the build-flag check that only `.ci/run` can make.",
    ]


# --- the batch curve at several context depths (bench_batch_depth.py) ------------------------
def batch_depth_table(run: Run) -> list:
    e = run.one("bench_batch_depth")["extra_info"]
    depths = e["depths"]
    first = next(iter(depths.values()))
    sizes = list(first["ratios_by_batch_size"])
    widest = sizes[-1]
    lines = [
        run.measured_line(),
        "",
        f"Qwen2.5-Coder 1.5B, {e['threads']} threads, flash attention on; a verify pass of each "
        f"batch size after each depth of context, {e['passes']} sweeps (sizes and depths in the "
        "opposite order every other sweep), the median pass over the median one-token pass at "
        f"the same depth; the last column, how far the {widest}-token ratio moved from sweep to "
        "sweep (each pass against its own sweep's one-token pass):",
        "",
        "| context (tokens) | one token (ms) | "
        + " | ".join(f"{n} tokens" for n in sizes)
        + f" | {widest} tokens, per sweep |",
        "|---|---|" + "---|" * len(sizes) + "---|",
    ]
    for depth, row in depths.items():
        low, high = row["sweep_ratio_range"][widest]
        lines.append(
            f"| {depth} | {row['one_token_ms']:.1f} | "
            + " | ".join(f"{row['ratios_by_batch_size'][n]:.2f}x" for n in sizes)
            + f" | {low:.1f}-{high:.1f}x |"
        )
    return lines


# --- the CUDA back end and the in-graph sampler on a GPU (benchmarks/device/) ----------------
def _device_line(run: Run) -> str:
    d = run.data
    gpu = d.get("gpu", "an unknown GPU").split(", ")
    if len(gpu) == 3:  # nvidia-smi's name, memory.total, driver_version
        gpu = [f"{gpu[0]} ({gpu[1]}, driver {gpu[2]})"]
    cuda = re.search(r"release ([0-9.]+)", d.get("nvcc", ""))
    host = d.get("host_cpu", "?").split("; ")
    if len(host) == 3:  # brand; family F, model M; N CPUs
        host = [f"{host[0]} ({host[1]}), {host[2]}"]
    return (
        f"*Measured {d.get('datetime', '?')[:10]} on an {gpu[0]}, CUDA "
        f"{cuda.group(1) if cuda else '?'}, host {host[0]} (`{run.where}`).*"
    )


def _pytest_counts(counts: dict) -> str:
    words = {"passed": "passed", "skipped": "skipped", "failures": "failed", "errors": "errors"}
    parts = [f"{counts[k]} {word}" for k, word in words.items() if counts[k]]
    failed = counts.get("failed_tests") or []
    shown = f" ({', '.join(failed[:3])}{', ...' if len(failed) > 3 else ''})" if failed else ""
    return ", ".join(parts) + shown


def cuda_device(run: Run) -> list:
    d = run.data
    if "check" not in d and "bench" not in d:
        raise MissingResults(f"{run.path}: neither the identity check nor the benchmark")
    out = [_device_line(run), ""]
    if "check" in d:
        c = d["check"]
        runs = c.get("mismatches_of_runs", {})
        out.append(
            f"Identity sweep (`device_check check`): {c['cases']} random calls ("
            f"{len(runs)} dtype and draft-mode pairs x "
            f"{len(c.get('mismatches_of_runs_by_params (0 = greedy; all must be 0)', []))} "
            "parameter sets, V = 1000, 32000 and 151936, 1-4 sequences of 0-8 drafts): "
            f"{c['gpu_vs_reference_mismatches (must be 0)']} differ from the portable-draw "
            f"rules, {c['greedy_gpu_vs_cpu_mismatches (must be 0)']} greedy ones from the CPU "
            f"library, {c['errors']} refused; log-probabilities within "
            f"{c['max_logprob_abs_diff']:.1e} of the CPU's."
        )
    extras = []
    if "pytest_test_cuda" in d:
        extras.append(f"`tests/test_cuda.py` on the GPU: {_pytest_counts(d['pytest_test_cuda'])}")
    if d.get("memcheck"):
        extras.append(f"compute-sanitizer's memcheck over the sweep: {d['memcheck']}")
    if extras:
        out += ["", "; ".join(extras) + "."]
    if "bench" in d:
        out += ["", *_device_bench(d)]
    g = d.get("graph")
    if g:
        out += ["", _graph_device_sentence(g)]
    return out


def _device_bench(d: dict) -> list:
    """The bandwidth table; with a paired before/after run, the kernel before and the speed-up
    (the call's time is then the median of the paired runs of this kernel)."""
    b = d["bench"]
    paired = _paired_medians(d.get("bench_paired"))
    top_p_alone = any(_sampling(e) == "top-p alone" for e in b["runs"])
    intro = (
        "One call (`device_check bench`, a CUDA-graph replay of the whole call; every draft "
        "accepted, so every row is read; sampled: temperature 0.8, top-k 40, top-p 0.95, "
        "min-p 0.05"
        + ("; top-p alone: temperature 1.2, top-p 0.9, no top-k" if top_p_alone else "")
        + "), its logit bytes over its time against a device-to-device copy's "
        f"{b['copy_GBps_read_plus_write']:.0f} GB/s (read + write)"
    )
    header = ["vocabulary", "dtype", "sampling", "batch", "k", "call", "logits read", "of copy"]
    if paired:
        before_is = d["bench_paired"].get(
            "before_is",
            "the row kernel before this one (one load in flight per thread, "
            "one shared atomic per histogram entry)",
        )
        after_is = d["bench_paired"].get("after_is")
        speed_up = f"the speed-up of {after_is}" if after_is else "this one's speed-up"
        intro += (
            f"; the last column, {before_is} and {speed_up}, medians of "
            f"{len(d['bench_paired']['before'])} runs of each, alternating in one lease"
        )
        header.append("before, speed-up")
    copy = b["copy_GBps_read_plus_write"]
    rows = []
    for e in b["runs"]:
        us, gbps = _call_us(e, paired), _call_gbps(e, paired)
        extra = []
        if paired:
            old = paired[_bench_key(e)][0]
            extra = [f"{old:.0f} us, {old / us:.2f}x"]
        rows.append(
            (
                str(e["V"]),
                e["dtype"],
                _sampling(e),
                str(e["batch"]),
                str(e["k"]),
                f"{us:.0f} us",
                f"{gbps:.0f} GB/s",
                f"{100 * gbps / copy:.1f}%",
                *extra,
            )
        )
    return [intro + ":", "", *_table(header, rows)]


def cuda_device_graph_rounds(run: Run) -> list:
    """The in-graph sampler's verify rounds on the GPU, host against graph (graph_checks.py)."""
    rounds = run.data.get("graph", {}).get("rounds")
    if not isinstance(rounds, list) or not rounds:
        raise MissingResults(f"{run.path}: no graph rounds")
    rows = [
        (
            r["params"],
            str(r["k"]),
            f"{r['host_round_ms']:.2f} ms ({r['host_after_decode_ms']:.2f})",
            f"{r['graph_round_ms']:.2f} ms ({r['graph_after_decode_ms']:.2f})",
            f"{r['round_ratio']:.2f}x",
        )
        for r in rounds
    ]
    return [
        _device_line(run),
        "",
        "One verify round on the tiny model (Qwen's vocabulary, random weights, every layer on "
        "the GPU, so the decode itself is short and the sampling shows), host against graph, "
        "medians of 12 alternating pairs: the whole round and, in brackets, what follows the "
        "decode call:",
        "",
        *_table(("sampling", "k", "host round", "graph round", "graph / host"), rows),
    ]


def cuda_device_speed(run: Run) -> list:
    """One sentence for docs/cuda.md's status: the f32 call at Qwen's vocabulary, batch 1 and
    64, from the same file as the table (so the prose cannot drift from it)."""
    b = run.data.get("bench")
    if not b:
        raise MissingResults(f"{run.path}: no bench")
    f32 = [
        e
        for e in b["runs"]
        if e["V"] == 151936 and e["dtype"] == "f32" and _sampling(e) in ("greedy", "sampled")
    ]
    if not f32:
        raise MissingResults(f"{run.path}: no f32 runs at V = 151936")
    paired = _paired_medians(run.data.get("bench_paired"))

    def gbps(runs):
        return [_call_gbps(e, paired) for e in runs]

    one = [e for e in f32 if e["batch"] == 1]
    many = [e for e in f32 if e["batch"] > 1]
    many_greedy = [e for e in many if _sampling(e) == "greedy"]
    greedy = min(_call_us(e, paired) for e in one if _sampling(e) == "greedy")
    sampled = min(_call_us(e, paired) for e in one if _sampling(e) == "sampled")
    copy = b["copy_GBps_read_plus_write"]
    gpu = run.data.get("gpu", "the GPU").split(",")[0]
    return [
        f"On the {gpu} ({run.data.get('datetime', '?')[:10]}), at batch 1 a call on two to nine "
        f"f32 rows of Qwen's vocabulary takes {greedy:.0f} us greedy and {sampled:.0f} us "
        f"sampled, {_span(gbps(one), '{:.0f}')} GB/s of the copy's {copy:.0f}; at batch "
        f"{many[0]['batch']}, {_span(gbps(many_greedy), '{:.0f}')}"
        f" GB/s greedy (`{run.where}`)."
    ]


def _sampling(e: dict) -> str:
    """A bench case's sampling as the tables name it (device_check's parameter sets)."""
    if e["params"] == "greedy":
        return "greedy"
    return "top-p alone" if e["params"].startswith("top_p") else "sampled"


def _bench_key(e: dict) -> tuple:
    return (e["V"], e["dtype"], e["params"], e["batch"], e["k"])


def _call_us(e: dict, paired: dict) -> float:
    """A bench case's call time: the median of this kernel's paired runs where there are
    some, else its own run's."""
    return paired[_bench_key(e)][1] if paired else e["us_graph_replay"]


def _call_gbps(e: dict, paired: dict) -> float:
    """Logit bytes read per second at that call time, in GB/s."""
    return e["logit_bytes"] / _call_us(e, paired) / 1e3


def _paired_medians(paired) -> dict:
    """{bench key: (before's median us, after's median us)} of paired runs, or {}."""
    if not paired:
        return {}
    times = {}
    for side in ("before", "after"):
        for runs in paired[side]:
            for e in runs:
                times.setdefault(_bench_key(e), {}).setdefault(side, []).append(
                    e["us_graph_replay"]
                )
    return {k: (median(v["before"]), median(v["after"])) for k, v in times.items()}


def _graph_device_sentence(g: dict) -> str:
    checks = []
    rows = g.get("rows", {})
    for name, c in rows.get("configs", {}).items():
        checks.append(f"{name} {c['differ']} of {c['rows']} rows differ (allowed {c['allowed']})")
    text = (
        f"In-graph sampler (`graph_checks.py`, the tiny model, every layer on the GPU; "
        f"model output on the GPU: {'yes' if g.get('output_on_gpu') else 'no'}): "
        + ("; ".join(checks) or "no row check")
        + "; "
    )
    if "no_copy" in rows:
        text += f"{rows['no_copy']['floats_or_ids_kept']} logits or candidates copied; "
    lp = g.get("logprobs", {})
    if "max_abs_diff" in lp:
        text += (
            f"logprobs within {lp['max_abs_diff']:.1e}, the same top 5 in "
            f"{lp['rows_with_same_top5']} of {lp['rows']} rows; "
        )
    gen = g.get("generate", {})
    if "ok" in gen:
        text += f"a generation {'equal to' if gen['ok'] else 'DIFFERENT from'} the host's; "
    rounds = g.get("rounds")
    if isinstance(rounds, list) and rounds:
        ratios = [r["round_ratio"] for r in rounds]
        text += f"a verify round graph / host {_span(ratios, suffix='x')} (k = 1-16)"
    failed = g.get("failed") or []
    return text.rstrip("; ") + (f". Failed: {', '.join(failed)}." if failed else ".")


SECTIONS = {
    "verify-table": (("verify-all", "verify"), verify_table),
    "server-table": (("server",), server_table),
    "server-chats-table": (("server-chats-family6-model167",), server_chats_table),
    "server-chats-line": (("server-chats-family6-model167",), server_chats_line),
    # The same Xeon with transparent huge pages at always for the whole run (session 47):
    # every server's weights in 2 MB pages, as pyspec serve's always are.
    "server-chats-table-thp-always": (
        ("server-chats-family6-model167-thp-always",),
        server_chats_table,
    ),
    # The same run a second time (session 48), to see whether the first run's chats figure
    # was one run's luck.
    "server-chats-table-thp-always-2": (
        ("server-chats-family6-model167-thp-always-2",),
        server_chats_table,
    ),
    # The Zen 5 EPYC (family 26, model 2), session 50, THP at madvise.
    "server-chats-table-family26-model2": (
        ("server-chats-family26-model2",),
        server_chats_table,
    ),
    # The same Zen 5 after pyspec serve streams one chunk per round (session 50, a09913c).
    "server-chats-table-family26-model2-chunks": (
        ("server-chats-family26-model2-chunks",),
        server_chats_table,
    ),
    # The Zen 5 with pyspec's Q4_K and Q6_K kernels and its weights read in (session 52).
    "server-chats-table-family26-model2-kernels": (
        ("server-chats-family26-model2-kernels",),
        server_chats_table,
    ),
    "parity": (("parity",), parity),
    "first-request-table": (("first-request",), first_requests),
    "generation-table": (("generation",), generation),
    "grammar-table": (("grammar",), grammar_table),
    "graph-table": (("graph",), graph_table),
    "logprobs-table": (("logprobs",), logprobs_table),
    "llama-build": (("llama-build",), llama_build),
    "test-run": (("test-run",), test_run),
    "llama-builds-table": (("llama-builds",), llama_builds_table),
    "costly-drafter-table": (("costly-drafter",), costly_drafter_table),
    "draftless-table": (("draftless",), draftless_table),
    "draftless-runs": (("draftless",), draftless_runs),
    # The same suite on another CPU, kept beside the README's (docs/draftless-runs.md).
    "draftless-table-zen3": (("draftless-family25-model1",), draftless_table),
    "draftless-table-family6-model167": (("draftless-family6-model167",), draftless_table),
    "draftless-table-family6-model167-huge-pages": (
        ("draftless-family6-model167-huge-pages",),
        draftless_table,
    ),
    # The same Xeon with llama.cpp built for AVX2 only (the kernels of an AVX2 CPU).
    "draftless-table-family6-model167-avx2-build": (
        ("draftless-family6-model167-avx2-build",),
        draftless_table,
    ),
    # And again with the remembered-copy rule on (session 33).
    "draftless-table-family6-model167-avx2-build-remembered": (
        ("draftless-family6-model167-avx2-build-remembered",),
        draftless_table,
    ),
    # And with the memory's answers' index (session 34: text only prompts hold not believed).
    "draftless-table-family6-model167-avx2-build-answers": (
        ("draftless-family6-model167-avx2-build-answers",),
        draftless_table,
    ),
    # The Zen 4 EPYC before the reproduction rule (session 35; the README's until session 36).
    "draftless-table-family25-model17-remembered": (
        ("draftless-family25-model17-remembered",),
        draftless_table,
    ),
    # The Zen 4 EPYC with the reproduction rule on, unread stops (session 36; the README's
    # until session 37).
    "draftless-table-family25-model17-reproduction": (
        ("draftless-family25-model17-reproduction",),
        draftless_table,
    ),
    # The Zen 4 EPYC with the edit request read (session 37; the README's until session 38).
    "draftless-table-family25-model17-read": (
        ("draftless-family25-model17-read",),
        draftless_table,
    ),
    # The Zen 4 EPYC with a fenced copy believed from its fence line (session 38's run of
    # 6fcffec, before 4e50c35 made it the fence line and a token of the code).
    "draftless-table-family25-model17-fence-line": (
        ("draftless-family25-model17-fence-line",),
        draftless_table,
    ),
    # Main's code after session 38 (learned stops), live twice: session 38's run (the
    # README's until session 39) and session 39's before the finish plan.
    "draftless-table-family25-model17-learned-stops": (
        ("draftless-family25-model17-learned-stops",),
        draftless_table,
    ),
    "draftless-table-family25-model17-learned-stops-2": (
        ("draftless-family25-model17-learned-stops-2",),
        draftless_table,
    ),
    # Session 39's second live run with the finish plan (the first is the README's).
    "draftless-table-family25-model17-finish-plan-2": (
        ("draftless-family25-model17-finish-plan-2",),
        draftless_table,
    ),
    # The same host and code on the 24 chats after the usual ones (session 40: held out).
    "draftless-table-family25-model17-held-out": (
        ("draftless-family25-model17-held-out",),
        draftless_table,
    ),
    # The same host with 4 chats, the edits and 6 conversations answered turn by turn with
    # the model's own answers (session 41: PYSPEC_BENCH_CHATS=4 PYSPEC_BENCH_MULTI_TURN=6).
    "draftless-table-family25-model17-multi-turn": (
        ("draftless-family25-model17-multi-turn",),
        draftless_table,
    ),
    # The AMX Xeon again (session 42, the AMX build, main's code of session 41): the usual 24
    # chats, the edits and 6 conversations answered turn by turn (PYSPEC_BENCH_MULTI_TURN=6).
    "draftless-table-family6-model167-multi-turn": (
        ("draftless-family6-model167-multi-turn",),
        draftless_table,
    ),
    # The same Xeon and code on the 24 chats after the usual ones (PYSPEC_BENCH_CHATS_AFTER=24).
    "draftless-table-family6-model167-held-out": (
        ("draftless-family6-model167-held-out",),
        draftless_table,
    ),
    # The same Xeon with transparent huge pages at always for the whole run (session 46):
    # llama.cpp's own weights in 2 MB pages too, as pyspec's always are.
    "draftless-table-family6-model167-thp-always": (
        ("draftless-family6-model167-thp-always",),
        draftless_table,
    ),
    # The same, on the 24 chats after the usual ones (session 47: held out, THP always).
    "draftless-table-family6-model167-thp-always-held-out": (
        ("draftless-family6-model167-thp-always-held-out",),
        draftless_table,
    ),
    # The usual 24 chats with THP always a second time (session 47).
    "draftless-table-family6-model167-thp-always-2": (
        ("draftless-family6-model167-thp-always-2",),
        draftless_table,
    ),
    # The Zen 5 EPYC (family 26, model 2: AVX-512, no AMX), session 50, main's code of
    # session 49: the usual 24 chats and the edits.
    "draftless-table-family26-model2": (("draftless-family26-model2",), draftless_table),
    # The same Zen 5 with pyspec's Q4_K kernel in the build (and the C++ tools'), session 51.
    "draftless-table-family26-model2-q4k-kernel": (
        ("draftless-family26-model2-q4k-kernel",),
        draftless_table,
    ),
    # The same Zen 5 with pyspec's Q4_K and Q6_K kernels (session 52).
    "draftless-table-family26-model2-q6k-kernel": (
        ("draftless-family26-model2-q6k-kernel",),
        draftless_table,
    ),
    # Again, pyspec's models read into memory and all their weights into 2 MB pages (session 52).
    "draftless-table-family26-model2-read-in": (
        ("draftless-family26-model2-read-in",),
        draftless_table,
    ),
    # The same Zen 5 with llama.cpp built for AVX2 only, with the kernels' AVX2 variants (s53).
    "draftless-table-family26-model2-avx2-build": (
        ("draftless-family26-model2-avx2-build",),
        draftless_table,
    ),
    # The Zen 5 (both kernels' VNNI variants, version 3) on 4 chats, the edits and 6 multi-turn
    # conversations answered with the model's own answers (PYSPEC_BENCH_MULTI_TURN=6; s53).
    "draftless-table-family26-model2-multi-turn": (
        ("draftless-family26-model2-multi-turn",),
        draftless_table,
    ),
    "draft-peer-table": (("draft-peer",), draft_peer_table),
    # The same suite on an Intel Xeon with AMX, where the draft model's costs can pay.
    "draft-peer-table-family6-model167": (("draft-peer-family6-model167",), draft_peer_table),
    # The AMX Xeon again with the drafting rules chosen since session 29 (session 43).
    "draft-peer-table-family6-model167-later-rules": (
        ("draft-peer-family6-model167-later-rules",),
        draft_peer_table,
    ),
    # The Zen 5 EPYC (family 26, model 2: AVX-512, no AMX), session 51.
    "draft-peer-table-family26-model2": (("draft-peer-family26-model2",), draft_peer_table),
    # The same Zen 5 with pyspec's Q4_K and Q6_K kernels, weights read in (session 52).
    "draft-peer-table-family26-model2-q6k-kernel": (
        ("draft-peer-family26-model2-q6k-kernel",),
        draft_peer_table,
    ),
    # The 0.5B draft model at fixed draft lengths on the AMX Xeon (session 43).
    "draft-lengths-table-family6-model167": (
        ("draft-lengths-family6-model167",),
        draft_lengths_table,
    ),
    # The Zen 5 EPYC (family 26, model 2), session 50.
    "draft-lengths-table-family26-model2": (
        ("draft-lengths-family26-model2",),
        draft_lengths_table,
    ),
    "tree-outlook-table": (("tree-outlook",), tree_outlook_table),
    "plain-stretch": (("plain-stretch",), plain_stretch),
    "plain-stretch-family6-model167": (("plain-stretch-family6-model167",), plain_stretch),
    "plain-stretch-family26-model2": (("plain-stretch-family26-model2",), plain_stretch),
    # The same after the weights went into 2 MB pages (pyspec/llama/huge_pages.py).
    "plain-stretch-family6-model167-huge-pages": (
        ("plain-stretch-family6-model167-huge-pages",),
        plain_stretch,
    ),
    # And with llama.cpp built for AVX2 only on the same Xeon.
    "plain-stretch-family6-model167-avx2-build": (
        ("plain-stretch-family6-model167-avx2-build",),
        plain_stretch,
    ),
    "batch-depth-table": (("batch-depth",), batch_depth_table),
    # The same on the Zen 4 EPYC (session 38), beside the Xeon's.
    "batch-depth-table-family25-model17": (("batch-depth-family25-model17",), batch_depth_table),
    "cuda-device": (("cuda-device",), cuda_device),
    "cuda-device-graph-rounds": (("cuda-device",), cuda_device_graph_rounds),
    "cuda-device-speed": (("cuda-device",), cuda_device_speed),
}
