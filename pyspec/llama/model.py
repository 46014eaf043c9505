"""SpeculativeLlama: llama-cpp-python's ``Llama`` with pyspec's speculative loop.

``Llama.create_completion``, ``create_chat_completion``, ``__call__`` and streaming all
consume ``Llama.generate``; ``SpeculativeMethods.generate`` runs pyspec's loop instead
(``loop.py``), which gives every one of them speculative decoding with stop strings,
``max_tokens``, ``seed`` and the sampling parameters untouched. Grammars (JSON schema and
JSON mode included) and logits processors are applied to every verify row before the fused
verifier samples it (``constraints/rows.py``). Requests that use something the verifier
cannot honour yet (mirostat, typical-p) run llama-cpp-python's plain loop instead, and the
log says so once per reason: the distribution is never silently changed.

``SpeculativeLlama`` is ``SpeculativeMethods`` over ``llama_cpp.Llama``; ``enable_speculation``
gives an existing Llama (one that llama_cpp.server created, say) the same methods by making
its class the speculative subclass of its class.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import secrets
import sys
import types
from collections.abc import Iterator

import llama_cpp
import numpy as np

from pyspec.errors import ArgumentTypeError, ClosedError, InvalidInputError
from pyspec.llama.completion_logprobs import check_n_top, completion_logprobs
from pyspec.llama.compute_thread import DecodingThreads, on_compute_thread, pinned
from pyspec.llama.compute_thread import later as later_on_compute_thread
from pyspec.llama.compute_thread import run as run_on_compute_thread
from pyspec.llama.constraints.grammar import GrammarState
from pyspec.llama.constraints.rows import RowConstraints
from pyspec.llama.context import context_outputs_per_seq
from pyspec.llama.drafting.adaptive import DEFAULT_DRAFT_MAX
from pyspec.llama.huge_pages import into_huge_pages, read_weights_in
from pyspec.llama.loop import Speculation
from pyspec.llama.options import (
    SpeculationOptions,
    check_draft_files,
    check_keywords,
    check_llama_threads,
)
from pyspec.llama.request import CompletionOptions, asking, current_options
from pyspec.llama.runtime.build_info import build_features
from pyspec.llama.runtime.guard import check_llama_build, system_info
from pyspec.llama.sampling_args import fallback_reason, sampling_params_for
from pyspec.llama.stream_chunks import coalesced_chunks

log = logging.getLogger("pyspec")

# llama-cpp-python's own defaults for generate's and create_completion's keyword arguments,
# read from their signatures, never copied: they follow the installed version.
_GENERATE_DEFAULTS = {
    name: param.default
    for name, param in inspect.signature(llama_cpp.Llama.generate).parameters.items()
    if param.default is not inspect.Parameter.empty
}
_COMPLETION_SIGNATURE = inspect.signature(llama_cpp.Llama.create_completion)


class SpeculativeMethods:
    """``generate`` and ``create_completion`` through pyspec's loop, for a ``llama_cpp.Llama``
    subclass whose ``speculation`` is its ``Speculation``."""

    speculation: Speculation

    def calibrate(self, progress=None, force: bool = False) -> dict:
        """Measures what a verify pass of every size up to draft_max + 1 costs on this machine
        and build (three sweeps of every size: about 100 s for a 1.5B model and draft_max 64 on
        2 Zen 4 cores, 4-5 minutes on 2 Zen 3 cores), so that the cost model drafts
        the lengths the kernels batch cheaply (on x86 builds that repack Q4_K weights, a
        batch of 16 tokens costs less than one of 15). The shape is kept in the cost cache:
        an object with the same model file and setup starts from it, and then calibrate()
        measures nothing unless ``force``. ``pyspec generate``/``serve`` call it on their
        own. ``progress``: called with a line per sweep. Returns n -> cost(n) / cost(1)."""
        costs = self.speculation.controller.costs
        if costs.calibrated_up_to(costs.max_n) and not force:
            return costs.prior_shape()
        self._note_decoding_thread()
        return self.speculation.calibrate(progress)

    def embed(self, *args, **kwargs):
        """``Llama.embed``; said once in the log if it decodes on a thread other than the
        loading one (``compute_thread.DecodingThreads``), as ``generate`` does."""
        self._note_decoding_thread()
        return super().embed(*args, **kwargs)

    def _note_decoding_thread(self) -> None:
        threads = getattr(self, "decoding_threads", None)
        warning = threads.note() if threads is not None else None
        if warning:
            log.warning(warning)

    def use_calibration(self, shape: dict) -> None:
        """Starts the cost model from a shape ``calibrate`` returned, on this object or on
        another with the same model file and setup (as a process holding several objects
        of one model would, instead of measuring for minutes again): no measurement, no
        cost-cache write. Raises InvalidInputError, changing nothing, for a shape that is
        implausible or misses a batch size up to draft_max + 1, or where the draft length
        is fixed."""
        self.speculation.use_calibration(shape, source="given by use_calibration()")

    def generate(self, tokens, **kwargs):
        """Drop-in for ``Llama.generate`` (same arguments, same tokens out, faster)."""
        spec = self.speculation
        self._note_decoding_thread()
        args = {**_GENERATE_DEFAULTS, **kwargs}
        options = current_options()
        if options is not None:  # create_completion decided, from the same arguments
            reason = options.fallback
        else:
            reason = fallback_reason(self, args["typical_p"], args["mirostat_mode"], args["reset"])
        if reason:
            if args["grammar"] is not None:
                check_grammar(self, args["grammar"])
            spec.fallback(reason)
            return llama_cpp.Llama.generate(self, tokens, **kwargs)
        seed = self._seed
        if seed % 2**32 == llama_cpp.LLAMA_DEFAULT_SEED:  # llama.cpp: "pick a random seed"
            seed = secrets.randbits(64)
        params = sampling_params_for(
            args["temp"],
            args["top_k"],
            args["top_p"],
            args["min_p"],
            seed,
            repeat_penalty=args["repeat_penalty"],
            frequency_penalty=args["frequency_penalty"],
            presence_penalty=args["presence_penalty"],
            penalty_last_n=self.last_n_tokens_size,
        )
        constraints = None
        if args["grammar"] is not None or args["logits_processor"] is not None:
            grammar = args["grammar"]
            state = GrammarState.parse(self, grammar) if grammar is not None else None
            processors = _processor_list(args["logits_processor"])
            constraints = RowConstraints(params, spec.n_vocab, state, processors)
        return spec.generate(tokens, params, args["stopping_criteria"], constraints, options)

    def create_completion(self, *args, **kwargs):
        """``Llama.create_completion`` with logprobs answered from the verifier's own rows.

        llama-cpp-python reads logprobs from ``scores``, which it fills only with
        ``logits_all=True`` (and then for every token, asked or not). Here the loop copies
        the rows of the emitted tokens (and with ``echo`` of the whole prompt, evaluated
        afresh so that no row is left from an earlier request) for the requests that ask for
        logprobs, and no row otherwise; without stream or echo pyspec answers the logprobs
        itself from the verifier's records. What the request asks travels to ``generate`` as
        its ``CompletionOptions`` (request.py)."""
        spec = self.speculation
        # A stream the caller abandoned (a client that left) is closed now, under the caller's
        # lock, so that its cleanup cannot run later, in another thread, over this request.
        spec.close_open_stream()
        bound = _COMPLETION_SIGNATURE.bind(self, *args, **kwargs)
        arguments = bound.arguments
        options = CompletionOptions(
            fallback=fallback_reason(
                self, arguments.get("typical_p", 1.0), arguments.get("mirostat_mode", 0)
            )
        )
        max_tokens = arguments.get(
            "max_tokens", _COMPLETION_SIGNATURE.parameters["max_tokens"].default
        )
        if isinstance(max_tokens, int) and max_tokens > 0:  # (None or <= 0: to the context's end)
            options.max_tokens = max_tokens
        wants = arguments.get("logprobs") is not None
        if (
            wants
            and not options.fallback
            and not (arguments.get("stream") or arguments.get("echo"))
        ):
            return self._completion_with_own_logprobs(bound, options)
        options.emitted_rows = wants
        options.prompt_rows = wants and bool(arguments.get("echo")) and not arguments.get("stream")
        if wants and self.scores.shape[0] < spec.n_ctx:  # created with logits_all=False
            # numpy maps a large allocation lazily: only the rows written cost memory.
            self.scores = np.ndarray((spec.n_ctx, spec.n_vocab), dtype=np.single)
        if options.prompt_rows:
            self.n_tokens = 0  # every prompt row is needed: nothing is taken from the cache
        with self._completing(options):
            result = llama_cpp.Llama.create_completion(self, *args, **kwargs)
        if isinstance(result, types.GeneratorType):
            spec.open_stream = self._stream(result, options)
            return spec.open_stream
        spec.answer_started(result["id"], spec.last)
        spec.answer_ended(spec.last)
        return result

    @contextlib.contextmanager
    def _completing(self, options: CompletionOptions):
        """For the duration of one call into llama-cpp-python: ``options`` are what generate
        is asked, and ``_logits_all`` allows logprobs where rows are kept (llama-cpp-python
        refuses them otherwise)."""
        setting = self.speculation.logits_all_setting
        self._logits_all = setting or options.emitted_rows
        try:
            with asking(options):
                yield
        finally:
            self._logits_all = setting

    def _stream(self, result, options: CompletionOptions):
        """llama-cpp-python's stream runs (and checks logprobs) when iterated: each chunk runs
        with this request's options, since another request may have run in between. With
        ``_pyspec_coalesce_stream`` (pyspec serve), the chunks of the tokens one round
        decided go out as one chunk (``coalesced_chunks``)."""
        spec, stats = self.speculation, None
        chunks = self._chunks(result, options)
        if getattr(self, "_pyspec_coalesce_stream", False):
            chunks = coalesced_chunks(chunks, lambda: spec.tokens_ready, lambda: spec.rounds_done)
        try:
            for chunk in chunks:
                # (the first chunk, merged or not, comes after the request has started)
                if stats is None:  # spec.last is this request's from its first token on
                    stats = spec.last
                    spec.answer_started(chunk["id"], stats)
                yield chunk
        finally:
            result.close()
            if stats is not None:  # (an abandoned stream ends when the next request starts)
                spec.answer_ended(stats)

    def _chunks(self, result, options: CompletionOptions):
        while True:
            with self._completing(options):
                chunk = next(result, None)
            if chunk is None:
                return
            yield chunk

    def _completion_with_own_logprobs(self, bound, options: CompletionOptions):
        """create_completion with ``logprobs=n`` answered by pyspec: llama-cpp-python runs the
        request without logprobs (no rows kept, no n_vocab sort per token) while the loop
        records each emitted token's RowLogprobs, laid out afterwards in its format."""
        spec = self.speculation
        options.logprobs_top = min(check_n_top(bound.arguments["logprobs"]), spec.n_vocab)
        bound.arguments["logprobs"] = None
        with asking(options):
            result = llama_cpp.Llama.create_completion(*bound.args, **bound.kwargs)
        result["choices"][0]["logprobs"] = completion_logprobs(
            self,
            bound.arguments["prompt"],
            options.logprobs,
            result["usage"]["completion_tokens"],
            options.logprobs_top,
        )
        spec.answer_started(result["id"], spec.last)
        spec.answer_ended(spec.last)
        return result


def _processor_list(logits_processor) -> list:
    """llama-cpp-python's logits_processor is a list of ``f(input_ids, scores) -> scores``
    (``LogitsProcessorList``); one bare callable is taken as a list of one."""
    if logits_processor is None:
        return []
    if callable(logits_processor) and not isinstance(logits_processor, (list, tuple)):
        return [logits_processor]
    processors = list(logits_processor)
    for p in processors:
        if not callable(p):
            raise ArgumentTypeError(f"logits_processor must hold callables, got {type(p).__name__}")
    return processors


_MIXED_CLASSES: dict = {}


def _mixed_class(mixin: type, cls: type, suffix: str) -> type:
    """``cls`` with ``mixin`` before it in a subclass named ``cls.__name__ + suffix``, made
    once per pair (``cls`` itself where it has the mixin already)."""
    if issubclass(cls, mixin):
        return cls
    if (mixin, cls) not in _MIXED_CLASSES:
        _MIXED_CLASSES[mixin, cls] = type(f"{cls.__name__}{suffix}", (mixin, cls), {})
    return _MIXED_CLASSES[mixin, cls]


def _speculative_class(cls: type) -> type:
    """The subclass of a Llama class with pyspec's generate and create_completion."""
    return _mixed_class(SpeculativeMethods, cls, "WithSpeculation")


def enable_speculation(llama: llama_cpp.Llama, draft=None, **options) -> Speculation:
    """Switches an existing ``llama_cpp.Llama`` to speculative decoding in place.

    It must have been created without llama-cpp-python's own ``draft_model`` (whose loop
    forces ``logits_all``); pass that drafter here instead. Returns the Speculation state
    (statistics in ``.last`` and ``.total``), also the Llama's ``speculation``. ``sampling``:
    see ``SpeculativeLlama``; a Llama created by llama-cpp-python directly has a context that
    samples one output per sequence in the graph, so "auto" verifies on the host there and
    "graph" raises. ``options``: SpeculativeLlama's (``draft_max``, ``draft_min``,
    ``draft_p_min``, ``adaptive``, ``sampling``, ``reproducible``, ``memory``)."""
    if not isinstance(llama, llama_cpp.Llama):
        raise ArgumentTypeError(
            f"enable_speculation takes a loaded llama_cpp.Llama, got {type(llama).__name__} "
            f"(to load a model from its path: SpeculativeLlama(path))"
        )
    check_keywords(options, "enable_speculation", inspect.signature(SpeculationOptions))
    check_draft_files(draft)
    return _enable(llama, draft, SpeculationOptions(**options))


def _enable(llama: llama_cpp.Llama, draft, options: SpeculationOptions) -> Speculation:
    if getattr(llama, "draft_model", None) is not None:
        raise InvalidInputError(
            "this Llama already has llama-cpp-python's draft_model; create it "
            "without one and pass the drafter to enable_speculation"
        )
    if getattr(llama, "speculation", None) is not None:
        raise InvalidInputError("this Llama decodes speculatively already")
    check_llama_build()  # the model is loaded, but its first call would crash
    spec = Speculation(llama, draft, options)
    llama.speculation = spec
    # (taken as the thread that loaded it: SpeculativeLlama and pyspec serve enable where
    # they load)
    threads = max(getattr(llama, "n_threads", 1) or 1, getattr(llama, "n_threads_batch", 1) or 1)
    llama.decoding_threads = DecodingThreads(openmp=_openmp_build(), threads=threads)
    llama.__class__ = _speculative_class(type(llama))
    # Llama.close() (also from llama_cpp.server when it switches models) frees the drafter and
    # the batch first: the exit stack runs its callbacks last in, first out.
    llama._stack.callback(spec.close)
    return spec


@functools.cache
def _openmp_build() -> bool:
    return build_features(system_info()).get("OPENMP") == "1"


class SpeculativeLlama(SpeculativeMethods, llama_cpp.Llama):
    """A ``llama_cpp.Llama`` that decodes speculatively with pyspec's fused verifier.

    >>> llm = SpeculativeLlama("target.gguf", draft="draft.gguf", n_ctx=4096)  # doctest: +SKIP
    >>> llm.create_completion("def fib(n):", max_tokens=64, temperature=0.0)  # doctest: +SKIP

    ``draft``: None or "lookup" (n-gram lookup in the prompt and output), a path to a small
    GGUF model with the same tokenizer, a ``llama_cpp.Llama``, a llama-cpp-python
    ``LlamaDraftModel`` (also accepted as ``draft_model=``), a pyspec ``Drafter``, or a list
    of two, free first: ``["lookup", "draft.gguf"]`` drafts with lookup and, where lookup
    has nothing worth verifying, with the draft model (one cost model decides both).
    ``draft_max``/``draft_min`` bound the draft length, chosen per round by a cost model
    unless ``adaptive=False`` (drafts beyond 16 only from a kind of draft that passed in full
    from the first round of several requests in a row, such as edits of one file);
    ``draft_p_min`` stops a draft model's draft when its top
    token's probability falls below it. ``sampling``: ``"graph"`` samples the verify rows
    inside llama.cpp's graph (point-mass drafts or greedy; no grammar, logits processors,
    logprobs or stopping_criteria: such a request raises ``InvalidRequestError``); ``"host"``
    has llama.cpp copy the rows out and verifies them with libpyspec; ``"auto"`` (default)
    uses the graph when the model's logits are computed on a GPU and the request allows, the
    host otherwise, saying why once in the log. ``reproducible=True``: every request's rows
    are those a fresh object would compute, whatever the cache held (cached cells are kept
    only as whole n_batch chunks; see docs/generation.md, "Seeds"); by default a seeded
    request repeated on the same object gives the same text, and one after other requests
    gives the same distribution. ``memory``: prompt lookup also searches the prompts and
    outputs of this object's earlier requests (True: up to 65,536 tokens, oldest out; an
    int: that many; False: off); only with adaptive lengths and not reproducible, whose
    promises a memory would break. ``huge_pages``: move the weights llama.cpp loaded into
    2 MB pages (Linux; ``huge_pages.py``; ``.huge_pages`` reports what was done, or why
    not), reading the file into memory for it (``use_mmap=False``) unless ``use_mmap`` is
    given; False, or ``PYSPEC_HUGE_PAGES=off``, leaves them as llama.cpp allocated them.
    ``compute_thread=True``: the model is loaded, and every call that decodes (completions,
    chats, embeddings, ``eval``, ``generate``, ``calibrate``) runs, on one thread of pyspec's
    that lives as long as the process, streamed answers token by token, whatever thread
    calls: for an application that calls the model from several threads (a web framework's
    worker pool), where llama.cpp's OpenMP build would give each of them a team of threads
    of its own and, with more of them than CPUs, slow every decode (10.1-10.9 against
    15.2-15.9 tok/s from three worker threads on 2 cores; docs/generation.md, "Threads").
    Without it the log says so once when a thread other than the one that loaded the model
    decodes. Whole answers asked from several threads at once queue on that thread; streams
    of one model take turns, as without it.
    Other keyword arguments go to ``llama_cpp.Llama``.
    Statistics: ``.speculation.last`` (last request) and ``.speculation.total``.
    """

    def __init__(
        self,
        model_path: str,
        *,
        draft=None,
        draft_max: int = DEFAULT_DRAFT_MAX,
        draft_min: int = 0,
        draft_p_min: float = 0.0,
        adaptive: bool = True,
        sampling: str = "auto",
        reproducible: bool = False,
        memory=True,
        huge_pages: bool = True,
        compute_thread: bool = False,
        **llama_kwargs,
    ):
        self.speculation = None
        # Checked before the model loads: bad options, a build that would crash on this CPU
        # (AMX), thread counts above the machine's cores.
        options = SpeculationOptions(
            draft_max, draft_min, draft_p_min, adaptive, sampling, reproducible, memory
        )
        check_llama_build()
        check_llama_threads(llama_kwargs)
        check_keywords(
            llama_kwargs,
            "SpeculativeLlama",
            inspect.signature(llama_cpp.Llama.__init__),
            inspect.signature(SpeculativeLlama.__init__),
        )
        if llama_kwargs.get("draft_model") is not None:
            if draft is not None:
                raise InvalidInputError("pass either draft= or draft_model=, not both")
            draft = llama_kwargs.pop("draft_model")
        llama_kwargs.pop("draft_model", None)
        check_draft_files(draft)
        if not isinstance(compute_thread, bool):
            raise ArgumentTypeError(
                f"compute_thread must be True or False, got {type(compute_thread).__name__}"
            )
        load = functools.partial(self._load, model_path, draft, options, huge_pages, llama_kwargs)
        if compute_thread:
            run_on_compute_thread(load)
            move_to_compute_thread(self)
        else:
            load()

    def _load(self, model_path, draft, options: SpeculationOptions, huge_pages, llama_kwargs):
        sampling = options.sampling
        if "use_mmap" not in llama_kwargs and read_weights_in(huge_pages):
            # (the weights llama.cpp does not repack reach 2 MB pages only from memory)
            llama_kwargs = dict(llama_kwargs, use_mmap=False)
        with context_outputs_per_seq(options.draft_max + 1 if sampling != "host" else 0):
            with into_huge_pages(huge_pages) as self.huge_pages:
                super().__init__(model_path, **llama_kwargs)
        log.info("pyspec: %s", self.huge_pages.describe())
        _enable(self, draft, options)

    def close(self):
        """Frees the model, context and drafter. Any later use of this object raises
        ``ClosedError`` (llama-cpp-python itself would read freed memory and crash)."""
        if hasattr(self, "_stack"):  # else __init__ failed before llama-cpp-python's part
            if getattr(self, "speculation", None) is not None:
                self.speculation.close()
            super().close()
        self.__class__ = ClosedSpeculativeLlama


def _raise_closed(name: str):
    def closed(self, *args, **kwargs):
        raise ClosedError(
            f"SpeculativeLlama.{name}: this model was closed (close() frees the model "
            f"and its context); create a new SpeculativeLlama to generate again"
        )

    closed.__name__ = name
    return closed


# Every public method of Llama that reaches the model or context, and __call__.
_MODEL_METHODS = tuple(
    name
    for name, member in vars(llama_cpp.Llama).items()
    if (not name.startswith("_") or name == "__call__")
    and name != "close"
    and callable(member)
    and not isinstance(member, (staticmethod, classmethod))
)


class _OnComputeThread:
    """Mixed in before a model's class by ``move_to_compute_thread`` (``compute_thread=True``,
    pyspec serve's models): the methods named in ``ON_COMPUTE_THREAD`` run on the compute
    thread (``compute_thread.py``), a stream token by token there."""

    def __del__(self):
        # (the garbage collector runs this on whatever thread allocates: never wait there)
        if sys.is_finalizing() or on_compute_thread():
            _call_now(self, "close", (), {})
        else:
            later_on_compute_thread(functools.partial(_call_now, self, "close", (), {}))


def routed_class_base(cls: type) -> type:
    """The class ``_OnComputeThread`` was mixed into to make ``cls`` (``cls`` itself where it
    has no routing): where the calls' own methods are."""
    if issubclass(cls, _OnComputeThread):
        return cls.__mro__[cls.__mro__.index(_OnComputeThread) + 1]
    return cls


def _routed(name: str):
    def on_thread(self, *args, **kwargs):
        if sys.is_finalizing():  # (the thread may be gone at exit)
            return _call_now(self, name, args, kwargs)
        result = run_on_compute_thread(_call_now, self, name, args, kwargs)
        return pinned(result) if isinstance(result, Iterator) else result

    on_thread.__name__ = on_thread.__qualname__ = name
    on_thread.__doc__ = getattr(SpeculativeLlama, name).__doc__
    return on_thread


def _call_now(llama, name: str, args, kwargs):
    """``llama``'s method ``name`` as its class has it now, without the routing: a
    SpeculativeLlama's call queued behind ``close`` meets the closed class's ClosedError,
    not the freed model. (A Llama routed by pyspec serve keeps its class after close; the
    server drops it then, and its lock lets no call wait behind the close.)"""
    # (a class without the routing where it was closed, or switched back, while it waited)
    return getattr(routed_class_base(type(llama)), name)(llama, *args, **kwargs)


# What decodes: llama-cpp-python's __call__ and chat handlers call create_completion, which
# calls generate; create_embedding calls embed; generate calls eval (llama_cpp.server streams
# a chat by calling the Llama class's create_chat_completion on the instance, which the
# routing does not see, but its handler calls the instance's create_completion, which it
# does). The rest read or change the context's state, so they queue with the decodes; close
# frees there (a model switch in pyspec serve waits for it, as it then waits for the load).
ON_COMPUTE_THREAD = (
    "create_completion",
    "create_chat_completion",
    "create_embedding",
    "embed",
    "eval",
    "generate",
    "calibrate",
    "use_calibration",
    "reset",
    "set_seed",
    "set_cache",
    "save_state",
    "load_state",
    "close",
)
for _name in ON_COMPUTE_THREAD:
    setattr(_OnComputeThread, _name, _routed(_name))
del _name


def _on_compute_thread_class(cls: type) -> type:
    """``cls`` (a Llama class) with ``_OnComputeThread`` before it."""
    return _mixed_class(_OnComputeThread, cls, "OnComputeThread")


def move_to_compute_thread(llama: llama_cpp.Llama) -> None:
    """From now on, ``llama``'s calls that decode or touch its context (``ON_COMPUTE_THREAD``)
    run on the compute thread, whatever thread makes them; streams item by item there. For a
    model loaded on that thread (``compute_thread.run``), so that one OpenMP team serves it:
    ``SpeculativeLlama(..., compute_thread=True)`` and pyspec serve's models. A user's
    subclass keeps its overrides (the routing is a subclass of the object's class)."""
    llama.__class__ = _on_compute_thread_class(type(llama))


SpeculativeLlamaOnComputeThread = _on_compute_thread_class(SpeculativeLlama)


class ClosedSpeculativeLlama(SpeculativeLlama):
    """What a SpeculativeLlama becomes on close(): every method that would reach the freed
    model raises ClosedError (close() itself may be called again)."""

    def close(self):
        pass


for _name in (*_MODEL_METHODS, "generate", "create_completion", "calibrate", "use_calibration"):
    setattr(ClosedSpeculativeLlama, _name, _raise_closed(_name))
del _name


def check_grammar(llama: llama_cpp.Llama, grammar) -> None:
    """llama-cpp-python hands a grammar to llama.cpp unparsed; one that does not parse gives
    a null sampler, and the next call crashes the process. Parse it first."""
    GrammarState.parse(llama, grammar).close()
