"""``pyspec generate`` and ``pyspec demo``: one request, streamed, with statistics.

Modes: speculative (lookup or a draft model, the default), ``--no-draft`` (pyspec's loop
without drafts) and ``--plain`` (llama-cpp-python's own loop). ``--compare`` runs the
speculative request and then the plain one, measured the same way: tokens counted where the
model's generate() yields them, tokens/s from the first token to the last (the prompt left
out of both), and the two texts compared.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field

from pyspec.errors import UsageError
from pyspec.llama.drafting.adaptive import DEFAULT_DRAFT_MAX
from pyspec.llama.options import SAMPLING_MODES

# Markers of a prompt that already carries a chat template: it is passed through unchanged.
TEMPLATED = ("<|im_start|>", "<start_of_turn>", "[INST]", "<|start_header_id|>", "<|user|>")


def number_in(
    kind: type, low=None, high=None, *, above: bool = False, below: bool = False, also=(), what=""
):
    """An argparse type: a ``kind`` (int or float) in [low, high] (``above``: low itself
    excluded; ``below``: high itself excluded), or one of ``also``; ``what`` says what the
    range means. Why: values out of range ran silently (``-n -5`` to the context's end,
    ``--top-p 7`` as 1), where the same value given to ``pyspec.SamplingParams`` raises
    (session 48's walk on a fresh clone)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            noun = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
        if value in also:
            return value
        too_low = low is not None and (value <= low if above else value < low)
        too_high = high is not None and (value >= high if below else value > high)
        if too_low or too_high or value != value or value in (float("inf"), float("-inf")):
            raise argparse.ArgumentTypeError(f"{text} is out of range: {what}")
        return value

    parse.__name__ = kind.__name__  # (argparse names the type in some messages)
    return parse


def add_generation_args(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument("-p", "--prompt", help="prompt text (default: a code-editing request)")
    src.add_argument("-f", "--file", help="read the prompt from this file ('-': standard input)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument(
        "--chat",
        action="store_true",
        default=None,
        help="wrap the prompt in the model's chat template (the default when the "
        "model has one and the prompt is not templated already)",
    )
    fmt.add_argument(
        "--raw", dest="chat", action="store_false", help="pass the prompt to the model as it is"
    )
    p.add_argument("--system", help="a system message (implies --chat)")
    p.add_argument(
        "-n",
        "--max-tokens",
        type=number_in(int, 1, also=(-1,), what="at least 1, or -1: until the model stops"),
        default=256,
        help="tokens to generate at most (-1: until the model stops or the context is full)",
    )
    p.add_argument(
        "--temp",
        type=number_in(float, what="a finite number"),
        default=0.0,
        help="temperature (0 or below: greedy)",
    )
    p.add_argument(
        "--top-k", type=number_in(int, 0, what="0 (off) or more"), default=40, help="0: off"
    )
    p.add_argument(
        "--top-p",
        type=number_in(float, 0.0, 1.0, above=True, what="in (0, 1]; 1 turns it off"),
        default=0.95,
    )
    p.add_argument(
        "--min-p",
        type=number_in(float, 0.0, 1.0, what="in [0, 1]; 0 turns it off"),
        default=0.05,
    )
    p.add_argument("--seed", type=number_in(int, 0, 2**64 - 1, what="in [0, 2**64)"), default=0)
    p.add_argument(
        "--draft-max",
        type=number_in(int, 1, what="at least 1 (--no-draft decodes without drafts)"),
        default=DEFAULT_DRAFT_MAX,
    )
    p.add_argument("--draft-min", type=number_in(int, 0, what="0 or more"), default=0)
    p.add_argument(
        "--draft-p-min", type=number_in(float, 0.0, 1.0, below=True, what="in [0, 1)"), default=0.0
    )
    p.add_argument("--fixed-draft", action="store_true", help="always draft --draft-max tokens")
    p.add_argument(
        "--no-calibrate",
        action="store_true",
        help="do not measure the batch costs at every draft length when the cost cache has "
        "none for this model and setup (three sweeps: about 2 minutes for a 1.5B model on 2 "
        "cores, up to 5 on slower ones; once)",
    )
    p.add_argument(
        "--reproducible",
        action="store_true",
        help="rows as a fresh model computes them whatever the cache held (with "
        "--seed and --fixed-draft: the same text on every run of this build)",
    )
    p.add_argument(
        "--sampling",
        choices=SAMPLING_MODES,
        default="auto",
        help="where verify rows are sampled: inside llama.cpp's graph (only tokens "
        "leave it), on the host (rows copied out), or auto: the graph when the "
        "model's logits are computed on a GPU and the request allows (default)",
    )
    p.add_argument(
        "-c",
        "--ctx-size",
        type=number_in(int, 0, what="0 (the model's own) or more"),
        default=4096,
        help="context size in tokens (0: the model's own)",
    )
    p.add_argument(
        "--flash-attn",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="flash attention in llama.cpp's attention (default: on, as in llama.cpp's own "
        "tools; llama-cpp-python leaves it off unless asked)",
    )
    p.add_argument(
        "-t",
        "--threads",
        type=number_in(int, 1, what="at least 1"),
        default=os.cpu_count() or 1,
        help="threads for llama.cpp (default: all cores; llama-cpp-python's own "
        "default is half of them)",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--no-draft",
        action="store_true",
        help="pyspec's loop without drafts (plain decoding, pyspec's sampler)",
    )
    mode.add_argument("--plain", action="store_true", help="llama-cpp-python's own loop, no pyspec")
    mode.add_argument(
        "--compare",
        action="store_true",
        help="then run plain llama-cpp-python too: speeds measured the same way "
        "and whether the texts match",
    )
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--grammar", metavar="FILE", help="constrain the output by a GBNF grammar")
    shape.add_argument(
        "--json-schema",
        metavar="FILE_OR_JSON",
        help="constrain the output to JSON matching this schema (a file or the schema itself)",
    )
    shape.add_argument("--json", action="store_true", help="constrain the output to any JSON")
    p.add_argument("--verbose", action="store_true", help="show llama.cpp's own log lines")


def read_prompt(args, default: str) -> str:
    if args.file == "-":
        return sys.stdin.read()
    if args.file:
        return _read_text(args.file, "-f")
    if args.prompt is not None:
        return args.prompt
    return default


def read_grammar(args):
    """The LlamaGrammar that --grammar, --json-schema or --json ask for (None: none)."""
    import llama_cpp

    if args.json:
        return llama_cpp.LlamaGrammar.from_string(llama_cpp.llama_grammar.JSON_GBNF, verbose=False)
    if args.grammar:
        return llama_cpp.LlamaGrammar.from_string(
            _read_text(args.grammar, "--grammar"), verbose=False
        )
    if args.json_schema:
        text = args.json_schema
        if not text.lstrip().startswith("{"):
            text = _read_text(text, "--json-schema")
        try:
            json.loads(text)
            return llama_cpp.LlamaGrammar.from_json_schema(text, verbose=False)
        except Exception as exc:  # json's and llama-cpp-python's converter's own errors
            raise UsageError(
                f"--json-schema: not a JSON schema llama-cpp-python can convert "
                f"({type(exc).__name__}: {exc})"
            ) from exc
    return None


def _read_text(path: str, option: str) -> str:
    if os.path.isdir(path):
        raise UsageError(f"{option} {path}: is a directory; give a text file")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise UsageError(f"{option} {path}: {exc.strerror.lower()}") from exc


@dataclass
class Timing:
    """Tokens as the model's generate() yields them, and when."""

    stamps: list = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return len(self.stamps)

    @property
    def rate(self) -> float:
        """Tokens per second after the first (the prompt is not in it)."""
        span = self.stamps[-1] - self.stamps[0] if len(self.stamps) > 1 else 0.0
        return (len(self.stamps) - 1) / span if span > 0 else 0.0


def _timed_generate(llm, timing: Timing) -> None:
    """Counts and stamps every token llm.generate() yields (both loops, the same way)."""
    inner = llm.generate

    def generate(tokens, **kwargs):
        for tok in inner(tokens, **kwargs):
            timing.stamps.append(time.perf_counter())
            yield tok

    llm.generate = generate


def _use_chat(llm, args, prompt: str) -> bool:
    if args.system is not None:
        if args.chat is False:
            raise UsageError("--system needs the chat template; drop --raw")
        return True
    if args.chat is not None:
        return args.chat
    has_template = bool(llm.metadata.get("tokenizer.chat_template"))
    return has_template and not _templated(prompt)


def _templated(prompt: str) -> bool:
    """Whether the prompt carries a chat template already (TEMPLATED): given as it is."""
    return any(marker in prompt for marker in TEMPLATED)


def _pieces(llm, prompt: str, chat: bool, system, request: dict):
    """The streamed text pieces of one request, through the chat template or not."""
    if chat:
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": prompt}
        ]
        for chunk in llm.create_chat_completion(messages, stream=True, **request):
            yield chunk["choices"][0]["delta"].get("content") or ""
    else:
        for chunk in llm.create_completion(prompt, stream=True, **request):
            yield chunk["choices"][0]["text"]


def _stream(llm, prompt: str, chat: bool, system, request: dict, echo: bool) -> str:
    text = []
    for piece in _pieces(llm, prompt, chat, system, request):
        text.append(piece)
        if echo:
            sys.stdout.write(piece)
            sys.stdout.flush()
    if echo:
        print(file=sys.stdout)
    return "".join(text)


def first_difference(a: str, b: str) -> int:
    """Index of the first character where a and b differ (len of the shorter if one is a
    prefix of the other; -1 when equal)."""
    if a == b:
        return -1
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def declined_draft_hint(spec, stats) -> str:
    """Why a draft model barely drafted, when the cost model decided against it: on a small
    machine a draft model can cost too much per token to pay for itself, and the user should
    hear that rather than wonder why there is no speedup."""
    from pyspec.llama.drafting.draft_model import DraftModel

    ctl = spec.costly_controller
    steps = stats.steps
    if (
        not isinstance(spec.costly_drafter, DraftModel)
        or spec.free_drafter is not None
        or not steps
        or stats.verify_steps > steps // 4
    ):
        return ""
    if ctl.budget is not None and "loss budget" in ctl.last_reason:
        return (
            f"the cost model decoded {stats.plain_steps} of {steps} rounds plainly: the "
            f"draft model may cost at most 3% over plain decoding until it has shown that "
            f"it pays, and its {ctl.budget.describe()} did not cover catching it up and "
            f"drafting; --lookup drafts from the prompt for free"
        )
    one = ctl.predicted_target(1)
    costs = f"a verify pass of 2 tokens costs {ctl.predicted_target(2) / one:.2f}x one token"
    if ctl.draft_cost > 0:
        costs += f" and each draft token {ctl.draft_cost / one:.2f}x a target token"
    return (
        f"the cost model decoded {stats.plain_steps} of {steps} rounds plainly: here {costs}, "
        f"more than this draft model's drafts are expected to save; --lookup drafts from "
        f"the prompt for free"
    )


@dataclass
class AutoDraft:
    """The demo's default: this draft model where it pays on this machine, else prompt lookup
    (pyspec/llama/drafting/choice.py decides, and the demo says which and why)."""

    path: str


def _choose_drafter(llm, target: str, auto: AutoDraft, build):
    """The lookup-drafted ``llm``, or a new one with the draft model if that pays here."""
    from pyspec.llama.drafting.choice import draft_model_outlook

    outlook = draft_model_outlook(llm.speculation, target, auto.path)
    name = os.path.basename(auto.path)
    if outlook.pays:
        print(
            f"pyspec: drafter: prompt lookup, and the draft model {name} where lookup has "
            f"nothing: {outlook.why} (--lookup for prompt lookup alone)",
            file=sys.stderr,
        )
        llm.close()
        return build(["lookup", auto.path])
    print(
        f"pyspec: drafter: prompt lookup (free drafts), not the draft model {name}: "
        f"{outlook.why} (--draft-model runs it anyway)",
        file=sys.stderr,
    )
    return llm


def run(target: str, draft, args, default_prompt: str) -> int:
    from pyspec.llama.runtime.guard import check_llama_build

    shaped = any(getattr(args, name, None) for name in ("grammar", "json_schema", "json"))
    if getattr(args, "sampling", "auto") == "graph" and shaped:
        # Known before any model loads: a grammar reads and masks every row on the host.
        raise UsageError(
            "--sampling graph cannot serve --grammar, --json-schema or --json "
            "(a grammar masks each verify row on the host); use --sampling auto"
        )

    check_llama_build()  # before anything loads: an AMX build would crash on this CPU
    import llama_cpp

    from pyspec.llama import SpeculativeLlama
    from pyspec.llama.runtime.log import quiet_llama_logs

    quiet_llama_logs(verbose=args.verbose)
    prompt = read_prompt(args, default_prompt)
    if not prompt.strip():
        raise UsageError("the prompt is empty")
    common = dict(
        n_ctx=args.ctx_size,
        verbose=args.verbose,
        n_threads=args.threads,
        flash_attn=args.flash_attn,
    )
    request = dict(
        max_tokens=args.max_tokens,
        temperature=args.temp,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        seed=args.seed,
        grammar=read_grammar(args),
    )
    if args.plain:
        what = "llama-cpp-python's own loop (no pyspec)"
    elif args.no_draft:
        what = "pyspec's loop without drafts"
    elif isinstance(draft, AutoDraft):
        what = "the drafter that pays here"
    elif isinstance(draft, str) and draft != "lookup":
        what = f"draft model {draft}"
    else:
        what = "prompt lookup"
    attention = "flash attention " + ("on" if args.flash_attn else "off")
    print(f"pyspec: loading {target} with {what}, {attention}", file=sys.stderr)
    if args.plain:
        llm = llama_cpp.Llama(model_path=target, **common)
    else:
        from pyspec.llama.graph.build import GraphSamplerUnavailable

        def build(chosen):
            return SpeculativeLlama(
                target,
                draft=chosen,
                draft_max=0 if args.no_draft else args.draft_max,
                draft_min=0 if args.no_draft else args.draft_min,
                draft_p_min=args.draft_p_min,
                adaptive=not args.fixed_draft,
                sampling=args.sampling,
                reproducible=args.reproducible,
                **common,
            )

        try:
            llm = build("lookup" if isinstance(draft, AutoDraft) else draft)
            print(f"pyspec: {llm.huge_pages.describe()}", file=sys.stderr, flush=True)
            if not args.no_calibrate:  # first: the drafter's choice reads the calibrated curve
                from pyspec.llama.drafting.calibration import calibrate_once

                calibrate_once(llm, lambda line: print(line, file=sys.stderr, flush=True))
            if isinstance(draft, AutoDraft):  # (a rebuilt object loads it from the cache)
                llm = _choose_drafter(llm, target, draft, build)
        except GraphSamplerUnavailable as exc:
            print(f"pyspec: error: {exc}", file=sys.stderr)
            return 2
    if request["grammar"] is not None:
        from pyspec.errors import InvalidRequestError
        from pyspec.llama.model import check_grammar

        try:  # llama-cpp-python's own loop (--plain, --compare) would crash on a bad one
            check_grammar(llm, request["grammar"])
        except InvalidRequestError as exc:
            llm.close()
            raise UsageError(f"--grammar: {exc}") from exc
    chat = _use_chat(llm, args, prompt)
    templated = args.chat is None and _templated(prompt)
    raw = "as given (raw: it is in a chat template already)" if templated else "as given (raw)"
    print(
        f"pyspec: prompt {'in the model chat template' if chat else raw}"
        + (
            ""
            if args.chat is not None or args.system is not None
            else " (--chat / --raw to choose)"
        ),
        file=sys.stderr,
    )
    timing = Timing()
    _timed_generate(llm, timing)
    t0 = time.perf_counter()
    text = _stream(llm, prompt, chat, args.system, request, echo=True)
    elapsed = time.perf_counter() - t0
    first = timing.stamps[0] - t0 if timing.stamps else elapsed
    label = "plain" if args.plain else "speculative"
    print(
        f"\n--- {label}: {timing.tokens} tokens in {elapsed:.2f}s, first after {first:.2f}s, "
        f"{timing.rate:.2f} tok/s after the first",
        file=sys.stderr,
    )
    if not args.plain:
        stats = llm.speculation.last
        print(f"--- {stats.summary()}", file=sys.stderr)
        if stats.cost_model:
            print(f"--- cost model: {stats.cost_model}", file=sys.stderr)
        hint = declined_draft_hint(llm.speculation, stats)
        if hint:
            print(f"--- {hint}", file=sys.stderr)
    llm.close()
    if args.compare:
        plain = llama_cpp.Llama(model_path=target, **common)
        plain_timing = Timing()
        _timed_generate(plain, plain_timing)
        plain_text = _stream(plain, prompt, chat, args.system, request, echo=False)
        plain.close()
        ratio = timing.rate / plain_timing.rate if plain_timing.rate > 0 else float("nan")
        print(
            f"--- plain llama-cpp-python: {plain_timing.tokens} tokens, "
            f"{plain_timing.rate:.2f} tok/s after the first; speculative {timing.rate:.2f} "
            f"tok/s: {ratio:.2f}x",
            file=sys.stderr,
        )
        at = first_difference(text, plain_text)
        if at < 0:
            print("--- the two texts are the same", file=sys.stderr)
        else:
            why = (
                " (greedy: llama.cpp's batched logits differ slightly from one-token ones, "
                "so the texts may part at a near-tie)"
                if args.temp == 0
                else " (sampled: the same seed draws the same distribution, not the same text, "
                "when the batch shapes differ)"
            )
            print(
                f"--- the texts differ from character {at}: speculative "
                f"{text[at : at + 30]!r}, plain {plain_text[at : at + 30]!r}{why}",
                file=sys.stderr,
            )
    return 0
