"""The in-graph sampler on whatever runs the model (a CUDA build of llama.cpp on a device
machine; the CPU build anywhere), checked and timed in one process: issue 11's item 6.

    python benchmarks/device/graph_checks.py MODEL.gguf OUT.json [--gpu-layers -1]

MODEL is pyspec.testing.tiny_gguf's model on a device machine (no network there, and the
real models are over the carry limit), a real GGUF elsewhere. Each check compares the graph
with the host path on the very same decode, so the model's weights do not matter:

  rows       tokens sampled in the graph against pyspec.sample on the same decode's host
             rows (greedy, llama-cpp-python's defaults, raw softmax; 24 seeds x 9 rows)
  no_copy    llama.cpp kept no sampled logits or candidates for any row
  logprobs   in-graph logprobs (token and top 5) against pyspec.row_logprobs on host rows
  generate   a generation with lookup drafts, sampling="graph" against "host" (fixed draft
             length, so both decode the same batches): the same tokens
  rounds     one verify round, host against graph, k in 1/4/8/16, 12 alternating pairs:
             the whole round and the part after the decode call

Writes every number to OUT.json and one line per check to stdout; exit status 1 when a
check fails. Nothing about speed is asserted.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import time

import numpy as np

SEEDS = 24  # x 9 rows per configuration


def _rows(llm, decoder, tokens) -> np.ndarray:
    decoder.remove_from(0)
    addr = decoder.decode(tokens, 0, len(tokens))
    flat = np.ctypeslib.as_array(
        (ctypes.c_float * (len(tokens) * llm.n_vocab())).from_address(addr)
    )
    return flat.reshape(len(tokens), llm.n_vocab()).copy()


def check_rows(llm, decoder, tokens, pyspec, GraphSampler, SamplingParams, llama_cpp) -> dict:
    rows = _rows(llm, decoder, tokens)
    configs = {
        "greedy": dict(temperature=0.0),
        "defaults": dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
        "raw": dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),
    }
    # Float arithmetic in the graph moves a draw only when its uniform falls within rounding
    # of a boundary: at most 1% of the rows with candidates cut, 2% for a raw softmax over the
    # whole vocabulary (README: In-graph sampling), plus one row for an exact tie.
    bound = {"greedy": 0.0, "defaults": 0.01, "raw": 0.02}
    out, copied = {}, 0
    for name, config in configs.items():
        differ = 0
        for seed in range(SEEDS):
            params = SamplingParams(seed=seed, **config)
            sampler = GraphSampler(llm.ctx, params, max_rows=len(tokens))
            try:
                decoder.remove_from(0)
                sampler.set_position(1)
                decoder.decode_sampled(tokens, 0, len(tokens))
                copied += sum(
                    llama_cpp.llama_get_sampled_logits_count_ith(llm.ctx, i)
                    + llama_cpp.llama_get_sampled_candidates_count_ith(llm.ctx, i)
                    for i in range(len(tokens))
                )
                graph = sampler.read(0, len(tokens))
            finally:
                sampler.detach()
            host = [pyspec.sample(rows[i], params, position=1 + i) for i in range(len(tokens))]
            differ += int(np.sum(graph != np.array(host)))
        n = SEEDS * len(tokens)
        out[name] = {"rows": n, "differ": differ, "allowed": int(bound[name] * n) + 1}
    return {
        "configs": out,
        "ok": all(c["differ"] <= c["allowed"] for c in out.values()),
        "no_copy": {"floats_or_ids_kept": int(copied), "ok": copied == 0},
    }


def check_logprobs(llm, decoder, tokens, pyspec, GraphSampler, SamplingParams) -> dict:
    rows = _rows(llm, decoder, tokens)
    sampler = GraphSampler(llm.ctx, SamplingParams(seed=3), max_rows=len(tokens), n_top=5)
    try:
        decoder.remove_from(0)
        sampler.set_position(1)
        decoder.decode_sampled(tokens, 0, len(tokens))
        sampled = sampler.read(0, len(tokens))
        graph = [sampler.logprobs(i) for i in range(len(tokens))]
    finally:
        sampler.detach()
    worst, same_top = 0.0, 0
    for i, g in enumerate(graph):
        h = pyspec.row_logprobs(rows[i], int(sampled[i]), 5)
        worst = max(
            worst,
            abs(g.logprob - h.logprob),
            float(np.max(np.abs(g.top_logprobs - h.top_logprobs))),
        )
        same_top += int(np.array_equal(g.top_ids, h.top_ids))
    return {
        "max_abs_diff": worst,
        "rows_with_same_top5": same_top,
        "rows": len(tokens),
        "ok": worst <= 1e-4 and same_top >= len(tokens) - 1,
    }


def check_generate(path, kw, SpeculativeLlama) -> dict:
    prompt = list(range(300, 340)) * 3  # repeats: lookup drafts from it
    tokens = {}
    for sampling in ("host", "graph"):
        llm = SpeculativeLlama(path, sampling=sampling, adaptive=False, draft_max=8, **kw)
        try:
            out = llm.create_completion(prompt, max_tokens=48, seed=5)
            tokens[sampling] = (
                out["choices"][0]["text"],
                llm.speculation.last.sampling,
                llm.speculation.last.accepted,
            )
        finally:
            llm.close()
    return {
        "host": tokens["host"][1],
        "graph": tokens["graph"][1],
        "accepted_graph": tokens["graph"][2],
        "ok": tokens["graph"][0] == tokens["host"][0] and tokens["graph"][1] == "graph",
    }


def check_rounds(llm, decoder, SamplingParams, paired_rounds, pairs: int = 12) -> list:
    prompt = list(range(500, 560))
    out = []
    for kind, params in (
        ("greedy", SamplingParams.greedy_params(seed=1)),
        ("default", SamplingParams(seed=1)),
    ):
        for k in (1, 4, 8, 16):
            n_past = len(prompt) - (k + 1)
            batch = prompt[n_past:]
            decoder.remove_from(0)
            decoder.decode(prompt[:n_past], 0, 1)
            out.append({"params": kind, "k": k, **paired_rounds(llm, batch, n_past, params, pairs)})
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--gpu-layers", type=int, default=-1)
    args = parser.parse_args(argv)

    import llama_cpp

    import pyspec
    from pyspec.llama import SpeculativeLlama
    from pyspec.llama.context import model_output_on_gpu
    from pyspec.llama.graph.sampling import GraphSampler
    from pyspec.params import SamplingParams
    from pyspec.testing.graph_rounds import paired_rounds

    kw = dict(n_ctx=512, n_threads=2, verbose=False, n_gpu_layers=args.gpu_layers)
    report = {
        "llama_cpp_python": llama_cpp.__version__,
        "gpu_offload_supported": bool(llama_cpp.llama_supports_gpu_offload()),
    }
    llm = SpeculativeLlama(args.model, sampling="graph", draft_max=16, **kw)
    report["n_vocab"] = llm.n_vocab()
    report["output_on_gpu"] = bool(model_output_on_gpu(llm))
    decoder = llm.speculation.decoder
    tokens = list(range(400, 409))
    steps = {
        "rows": lambda: check_rows(
            llm, decoder, tokens, pyspec, GraphSampler, SamplingParams, llama_cpp
        ),
        "logprobs": lambda: check_logprobs(
            llm, decoder, tokens, pyspec, GraphSampler, SamplingParams
        ),
        "rounds": lambda: check_rounds(llm, decoder, SamplingParams, paired_rounds),
    }
    failed = []
    for name, step in steps.items():
        t0 = time.perf_counter()
        try:
            report[name] = step()
        except Exception as exc:
            report[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        ok = report[name].get("ok", True) if isinstance(report[name], dict) else True
        failed += [] if ok else [name]
        print(
            f"graph check {name}: {'ok' if ok else 'FAILED'} ({time.perf_counter() - t0:.1f} s) "
            f"{json.dumps(report[name])[:300]}",
            flush=True,
        )
    llm.close()
    try:
        report["generate"] = check_generate(args.model, kw, SpeculativeLlama)
    except Exception as exc:
        report["generate"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    if not report["generate"]["ok"]:
        failed.append("generate")
    print(
        "graph check generate:",
        "ok" if report["generate"]["ok"] else "FAILED",
        json.dumps(report["generate"]),
    )
    report["failed"] = failed
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(
        f"graph checks: output on GPU {report['output_on_gpu']}, vocabulary {report['n_vocab']}, "
        f"failed: {', '.join(failed) or 'none'}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
