"""Records the real generations that tests/test_replay.py replays (run by hand, not in CI):

    cd tests && python3 data/record_generations.py            # everything
    cd tests && python3 data/record_generations.py NAME ...   # only these cases; the rest
                                                              # of the file (costs too) kept

For each case it generates with plain llama-cpp-python on the real model (the prompts of
benchmarks/bench_generation.py), and measures the model's forward cost per batch size on this
machine (best of 7, relative to one token). The rename case is recorded from a speculative
greedy run: plain greedy decoding of that prompt happens to leave the variable unrenamed (a
near-tie that batch numerics tip the other way), and the renamed text is the harder one for a
drafter. Writes recorded_generations.json beside this file.
"""

import json
import sys
import time
from pathlib import Path

import llama_cpp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "benchmarks"))
from bench_generation import PROMPTS  # noqa: E402

from pyspec.llama import SpeculativeLlama  # noqa: E402
from pyspec.llama.batch_decoder import BatchDecoder  # noqa: E402
from pyspec.testing.models import ensure_model  # noqa: E402

# speculative: False (plain llama-cpp-python), True (pyspec, draft length fixed at 8) or
# "adaptive" (pyspec as the benchmark runs it)
CASES = (
    [  # name, model, prompt, temperature, speculative, seed
        ("qwen-rename-greedy", "qwen2.5-coder-1.5b", "edit", 0.0, True, 3),
        ("qwen-free-greedy", "qwen2.5-coder-1.5b", "free", 0.0, False, 3),
        ("gemma-repeat-greedy", "gemma3-270m", "repeat", 0.0, False, 3),
        ("gemma-free-0.8", "gemma3-270m", "free", 0.8, False, 3),
    ]
    + [  # sampled copies leave their source at random: several draws of the hardest case
        (f"gemma-repeat-0.8-s{seed}", "gemma3-270m", "repeat", 0.8, False, seed)
        for seed in range(1, 13)
    ]
    + [  # the same, after the draw that leaves the copy at once (p = 0.23: "\n" instead of
        # "\n\n" after the first line); the model then writes new code with pieces of the file
        (f"gemma-repeat-0.8-novel-s{seed}", "gemma3-270m", "repeat+0.08\n", 0.8, False, seed)
        for seed in range(1, 13)
    ]
    + [  # pyspec's own draw as the benchmark makes it (seed 7; the text also depends on the
        # draft lengths chosen, which depend on timing)
        ("gemma-repeat-0.8-bench-s7", "gemma3-270m", "repeat", 0.8, "adaptive", 7),
    ]
)
SIZES = [1, 2, 3, 4, 5, 7, 9, 13, 17]
KW = dict(n_ctx=2048, n_threads=2, verbose=False)
MAX_TOKENS = 300


def batch_costs(llm, prompt):
    dec = BatchDecoder(llm.ctx, llm.n_vocab(), 512)
    dec.decode(prompt, 0, 1)
    best = {n: float("inf") for n in SIZES}
    for _ in range(7):
        for n in SIZES:
            t0 = time.perf_counter()
            dec.decode([prompt[-1]] * n, len(prompt), n)
            best[n] = min(best[n], time.perf_counter() - t0)
            dec.remove_from(len(prompt))
    dec.close()
    return {n: round(best[n] / best[1], 3) for n in SIZES}


def main(only):
    path_json = HERE / "recorded_generations.json"
    old = json.loads(path_json.read_text()) if only and path_json.exists() else None
    unknown = set(only) - {c[0] for c in CASES}
    if unknown:
        raise SystemExit(f"no such case: {sorted(unknown)}")
    out, costs = [], {}
    if old is not None:
        costs = {m: {int(n): c for n, c in t.items()} for m, t in old["costs"].items()}
        out = [g for g in old["generations"] if g["name"] not in only]
    for name, model, prompt_name, temp, speculative, seed in CASES:
        if only and name not in only:
            continue
        path = str(ensure_model(model))
        llm = (
            SpeculativeLlama(path, draft="lookup", seed=seed, **KW)
            if speculative == "adaptive"
            else SpeculativeLlama(
                path, draft="lookup", adaptive=False, draft_max=8, seed=seed, **KW
            )
            if speculative
            else llama_cpp.Llama(model_path=path, seed=seed, **KW)
        )
        prompt_name, _, forced = prompt_name.partition("+")  # forced: the output's start
        prompt = llm.tokenize(PROMPTS[prompt_name].encode(), special=True)
        prompt += llm.tokenize(forced.encode(), add_bos=False, special=True) if forced else []
        vocab = llama_cpp.llama_model_get_vocab(llm.model)
        tokens = []
        for t in llm.generate(prompt, temp=temp, top_k=40, top_p=0.95, min_p=0.05):
            if llama_cpp.llama_vocab_is_eog(vocab, t) or len(tokens) >= MAX_TOKENS:
                break
            tokens.append(int(t))
        if model not in costs:
            plain = llama_cpp.Llama(model_path=path, seed=3, **KW)
            costs[model] = batch_costs(plain, prompt)
            plain.close()
        out.append(dict(name=name, model=model, temperature=temp, prompt=prompt, output=tokens))
        print(f"{name}: {len(prompt)} prompt tokens, {len(tokens)} generated", flush=True)
        llm.close()
    data = dict(
        costs={m: {str(n): c for n, c in t.items()} for m, t in costs.items()}, generations=out
    )
    order = {c[0]: i for i, c in enumerate(CASES)}
    data["generations"].sort(key=lambda g: order.get(g["name"], len(order)))
    path_json.write_text(json.dumps(data))
    print(json.dumps(data["costs"], indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
