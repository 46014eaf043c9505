"""SpeculativeLlama: llama-cpp-python's ``Llama`` with pyspec's speculative loop.

``Llama.create_completion``, ``create_chat_completion``, ``__call__`` and streaming all
consume ``Llama.generate``; replacing that one generator gives every one of them
speculative decoding with stop strings, ``max_tokens``, ``seed`` and the sampling
parameters untouched. Grammars (JSON schema and JSON mode included) and logits processors
are applied to every verify row before the fused verifier samples it
(``constraints/rows.py``). Requests that use something the verifier cannot honour yet
(mirostat, typical-p) run llama-cpp-python's plain loop instead, and the log says so once per
reason: the distribution is never silently changed.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import inspect
import logging
import secrets
import threading
import time
import types
from dataclasses import dataclass
from typing import Optional

import llama_cpp
import numpy as np

from pyspec._native.abi import MAX_GRAPH_TOP, MAX_PENALTY_WINDOW
from pyspec.checks import penalty_window
from pyspec.errors import (
    ArgumentTypeError,
    ClosedError,
    InvalidInputError,
    InvalidRequestError,
    PyspecError,
    PyspecRuntimeError,
)
from pyspec.llama.batch_decoder import BatchDecoder
from pyspec.llama.completion_logprobs import check_n_top, completion_logprobs
from pyspec.llama.constraints.grammar import GrammarState
from pyspec.llama.constraints.rows import RowConstraints
from pyspec.llama.drafting.adaptive import COSTLY_DRAFTER, FREE_DRAFTER, DraftLengthController
from pyspec.llama.drafting.base import Draft, Drafter
from pyspec.llama.drafting.callable import CallableDrafter
from pyspec.llama.drafting.choice import size_ratio
from pyspec.llama.drafting.combined import CombinedDrafter
from pyspec.llama.drafting.cost_cache import (
    cost_cache_file,
    drafter_cache_file,
    load_drafter_record,
    load_ratios,
    save_drafter_record,
    save_ratios,
)
from pyspec.llama.drafting.draft_model import DraftModel
from pyspec.llama.drafting.lookup import PromptLookup
from pyspec.llama.drafting.request_memory import RequestMemory
from pyspec.llama.graph.build import GraphSamplerUnavailable
from pyspec.llama.graph.sampling import GraphSampler, graph_unavailable_reason, point_mass_result
from pyspec.llama.options import (
    check_draft_range,
    check_llama_threads,
    check_sampling_mode,
    memory_size,
)
from pyspec.llama.prefix_reuse import PrefixReuse
from pyspec.llama.rounds import Round
from pyspec.llama.runtime.guard import check_llama_build
from pyspec.llama.stats import SpeculationStats
from pyspec.params import SamplingParams
from pyspec.request import LogitsPointer, VerifyResult
from pyspec.verifier import row_logprobs, verify, verify_from_pointer

log = logging.getLogger("pyspec")


def sampling_params_for(
    temp: float,
    top_k: int,
    top_p: float,
    min_p: float,
    seed: int,
    *,
    repeat_penalty: float = 1.0,
    frequency_penalty: float = 0.0,
    presence_penalty: float = 0.0,
    penalty_last_n: int = 64,
) -> SamplingParams:
    """llama-cpp-python's sampling arguments as pyspec SamplingParams (same chain:
    penalties first, then greedy, or top-k, top-p, min-p, temperature)."""
    seed %= 2**64
    penalties = dict(
        repeat_penalty=float(repeat_penalty),
        frequency_penalty=float(frequency_penalty),
        presence_penalty=float(presence_penalty),
        penalty_last_n=max(0, min(int(penalty_last_n), MAX_PENALTY_WINDOW)),
    )
    if temp == 0.0:
        return SamplingParams(
            temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed, **penalties
        )
    if temp < 0.0:  # llama-cpp-python: a draw from the raw softmax, no transforms
        return SamplingParams(
            temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed, **penalties
        )
    return SamplingParams(
        temperature=float(temp),
        top_k=int(top_k),
        top_p=min(max(float(top_p), 1e-9), 1.0),  # p <= 0 keeps the top one
        min_p=min(float(min_p), 1.0),
        seed=seed,
        **penalties,
    )


def unsupported_reason(*, typical_p=1.0, mirostat_mode=0) -> str:
    """Why a request cannot be verified exactly yet ('' when it can)."""
    if mirostat_mode:
        return f"mirostat (mode {mirostat_mode})"
    if typical_p < 1.0:
        return "typical-p sampling"
    return ""


def make_drafter(draft, target: llama_cpp.Llama, draft_p_min: float) -> Drafter:
    """A Drafter from what the user passed: None or "lookup", a GGUF path, a Llama, a
    llama-cpp-python LlamaDraftModel (or any callable ids -> ids), a Drafter, or a list of
    these in order, a free one then a costly one (``["lookup", "draft.gguf"]``: combined.py)."""
    if isinstance(draft, (list, tuple)):
        if len(draft) == 1:
            return make_drafter(draft[0], target, draft_p_min)
        if len(draft) != 2:
            raise InvalidInputError(
                f"draft takes a list of two drafters (free first, e.g. ['lookup', "
                f"'draft.gguf']), got {len(draft)}"
            )
        free = make_drafter(draft[0], target, draft_p_min)
        try:
            return CombinedDrafter(free, make_drafter(draft[1], target, draft_p_min))
        except BaseException:
            free.close()
            raise
    if draft is None or (isinstance(draft, str) and draft == "lookup"):
        return PromptLookup()
    if isinstance(draft, Drafter):
        drafter = draft
    elif isinstance(draft, (str, bytes)) or hasattr(draft, "__fspath__"):
        drafter = DraftModel(
            draft,
            p_min=draft_p_min,
            n_ctx=target.n_ctx(),
            n_threads=target.context_params.n_threads,
        )
    elif isinstance(draft, llama_cpp.Llama):
        drafter = DraftModel(draft, p_min=draft_p_min)
    elif callable(draft):
        return CallableDrafter(draft, target.n_vocab())
    else:
        raise ArgumentTypeError(
            f"draft must be None, 'lookup', a GGUF path, a llama_cpp.Llama, a "
            f"LlamaDraftModel or a pyspec Drafter; got {type(draft).__name__}"
        )
    if isinstance(drafter, DraftModel):
        drafter.check_compatible(target)
    return drafter


class Speculation:
    """The speculative state attached to one Llama: drafter, controller, statistics."""

    def __init__(
        self,
        llama: llama_cpp.Llama,
        draft=None,
        *,
        draft_max: int = 16,
        draft_min: int = 0,
        draft_p_min: float = 0.0,
        adaptive: bool = True,
        sampling: str = "auto",
        reproducible: bool = False,
        memory=True,
    ):
        check_sampling_mode(sampling)
        memory_tokens = memory_size(memory)
        check_draft_range(draft_min, draft_max)
        # "auto" samples in the graph where that saves a device-to-host copy of the rows: on a
        # model whose output layer runs on a GPU. On the CPU the rows are in host memory
        # already, and the host path measured faster (README: In-graph sampling).
        auto_host = (
            ""
            if sampling != "auto" or model_output_on_gpu(llama)
            else (
                "the model runs on the CPU, where the host path reads llama.cpp's rows in place "
                "and measured faster (sampling='graph' forces the graph)"
            )
        )
        # Why no request can be sampled in the graph with this context ('' when they can):
        # checked before anything is allocated.
        graph_unavailable = (
            ""
            if sampling == "host" or auto_host
            else self._graph_context_reason(llama, draft_max + 1)
        )
        if sampling == "graph" and graph_unavailable:
            raise GraphSamplerUnavailable(f"sampling='graph': {graph_unavailable}")
        if llama.n_ctx() <= draft_max + 1:
            raise InvalidInputError(
                f"draft_max {draft_max} leaves no room in a context of {llama.n_ctx()}"
            )
        if draft_max + 1 > llama.n_batch:  # llama.cpp aborts on a batch above n_batch
            raise InvalidInputError(
                f"draft_max {draft_max} needs n_batch >= {draft_max + 1}, "
                f"this Llama has n_batch {llama.n_batch}"
            )
        self.llama = llama
        self.reproducible = bool(reproducible)
        self.drafter = make_drafter(draft, llama, draft_p_min)
        self.drafter.set_reproducible(self.reproducible)
        # The memory of earlier requests makes a request's drafts depend on what came before
        # it: only where nothing promises otherwise (adaptive lengths, not reproducible).
        members = getattr(self.drafter, "members", (self.drafter,))
        self.free_drafter = next((d for d in members if d.free), None)
        self.costly_drafter = next((d for d in members if not d.free), None)
        self.memory: Optional[RequestMemory] = None
        if (
            memory_tokens
            and adaptive
            and not self.reproducible
            and isinstance(self.free_drafter, PromptLookup)
        ):
            self.memory = RequestMemory(memory_tokens)
            self.free_drafter.use_memory(self.memory)
        watch = FREE_DRAFTER if self.free_drafter is not None else COSTLY_DRAFTER
        self.controller = DraftLengthController(
            draft_min, draft_max, fixed=not adaptive, watch=watch
        )
        # The costly drafter's controller: the same one alone; beside a free drafter its
        # own (its acceptance, costs and loss budget), on the same batch-cost curve.
        self.costly_controller: Optional[DraftLengthController] = None
        if self.costly_drafter is not None:
            self.costly_controller = self.controller
            if self.free_drafter is not None:
                self.costly_controller = DraftLengthController(
                    draft_min, draft_max, fixed=not adaptive, watch=COSTLY_DRAFTER
                )
                self.costly_controller.costs = self.controller.costs
        self.decoder = BatchDecoder(llama.ctx, llama.n_vocab(), llama.n_batch)
        # What the target's cache holds, so that a repeated request gives the same rows;
        # reproducible=True also keeps only what a fresh evaluation would compute the same.
        self.prefix_reuse = PrefixReuse(llama.n_batch, canonical=self.reproducible)
        self._prompt_row: Optional[np.ndarray] = None  # the saved row in use by this request
        self._left_n_tokens = -1  # llama.n_tokens when our last request ended
        self.n_vocab = llama.n_vocab()
        # (emitted rows, prompt rows) to keep in llama.scores for the request under way, set
        # by create_completion from its logprobs/echo; None: follow llama._logits_all.
        self.rows_for_request: Optional[tuple] = None
        # n_top of the logprobs that pyspec answers itself for the request under way (without
        # rows in scores; create_completion sets it); None: none asked. Each emitted token
        # lands in last_logprobs as (token, RowLogprobs).
        self.logprobs_request: Optional[int] = None
        self.last_logprobs: list = []
        self.logits_all_setting = bool(llama._logits_all)  # what the user created it with
        self.open_stream = None  # the last streamed completion, until a new request starts
        self._closed = False
        # llama.cpp pads n_ctx up; llama-cpp-python's input_ids has the size asked for.
        self.n_ctx = min(llama.n_ctx(), len(llama.input_ids))
        self.total = SpeculationStats()
        self.last: Optional[SpeculationStats] = None
        self._reported: set = set()
        # The batch-cost shape an earlier process learned with this model and setup: a prior
        # (validated on load) that this process's own passes override; no calibration.
        self._cost_file = cost_cache_file(llama) if adaptive else None
        cached = load_ratios(self._cost_file)
        if cached is not None:
            self.controller.use_cost_prior(cached, source=f"cache {self._cost_file.name}")
        # A draft model: its cost before it has drafted, from the models' sizes (decoding
        # one token reads every weight once), and what earlier processes learned about it
        # beside this target (the loss budget's balance, its measured costs).
        self._drafter_file = None
        if isinstance(self.costly_drafter, DraftModel):
            dm = self.costly_drafter
            self.costly_controller.draft_cost_ratio = size_ratio(
                dm.llama.model_path, llama.model_path
            )
            self._drafter_file = drafter_cache_file(self._cost_file, dm.llama)
            self.costly_controller.use_drafter_record(load_drafter_record(self._drafter_file))
        self.sampling = sampling
        self._graph: Optional[GraphSampler] = None  # attached for the request under way
        self._first_output = 0  # batch index of the last decode's first output row
        self.graph_unavailable = graph_unavailable
        self._auto_host = auto_host

    @staticmethod
    def _graph_context_reason(llama: llama_cpp.Llama, rows: int) -> str:
        """Why no request can be sampled in this context's graph ('' when they can)."""
        per_seq = int(llama.context_params.n_outputs_max_per_seq)
        if per_seq and per_seq < rows:
            return (
                f"this Llama's context samples at most {per_seq} output(s) per sequence in the "
                f"graph (llama-cpp-python's default is 1); a verify round needs {rows}: create "
                f"the model with SpeculativeLlama, which asks llama.cpp for draft_max + 1"
            )
        if int(llama.context_params.n_ubatch) < rows:
            return (
                f"n_ubatch {llama.context_params.n_ubatch} splits a verify round of {rows} rows "
                f"over several graphs"
            )
        return graph_unavailable_reason()

    def _host_reason(
        self,
        params: SamplingParams,
        constraints,
        logit_rows: bool,
        stopping_criteria,
        logprobs_top: Optional[int] = None,
    ) -> str:
        """Why this request's rows must be sampled on the host ('' when they can be sampled
        in the graph)."""
        if self.sampling == "host":
            return "sampling='host'"
        if self.graph_unavailable:
            return self.graph_unavailable
        if self._auto_host:
            return self._auto_host
        if constraints is not None:
            return "grammars and logits processors (they read and change each row)"
        if logit_rows:
            return "logprobs with echo or stream (llama-cpp-python reads each token's row)"
        if logprobs_top is not None and logprobs_top > MAX_GRAPH_TOP:
            return f"more than {MAX_GRAPH_TOP} top logprobs per token"
        if stopping_criteria is not None:
            return "stopping_criteria (they read each emitted token's row)"
        if not self.drafter.point_mass(params):
            return (
                "draft probabilities (a draft model sampling at temperature > 0 is "
                "verified by rejection sampling against its q)"
            )
        return ""

    def _choose_sampling(
        self,
        params: SamplingParams,
        constraints,
        logit_rows: bool,
        stopping_criteria,
        stats: SpeculationStats,
        logprobs_top: Optional[int] = None,
    ) -> None:
        """Attaches the in-graph sampler for this request when it can be used (computing
        ``logprobs_top`` top logprobs per row when that is set)."""
        reason = self._host_reason(params, constraints, logit_rows, stopping_criteria, logprobs_top)
        if not reason:
            try:
                self._graph = GraphSampler(
                    self.llama.ctx, params, self.controller.draft_max + 1, n_top=logprobs_top
                )
            except (PyspecError, GraphSamplerUnavailable) as exc:
                if self.sampling == "graph":
                    raise
                reason = self.graph_unavailable = str(exc)
        if reason and self.sampling == "graph":
            raise InvalidRequestError(
                f"sampling='graph' cannot sample this request in the graph: "
                f"{reason}; use sampling='auto' or 'host'"
            )
        stats.sampling = (
            "graph"
            if self._graph is not None
            else ("host" if self.sampling == "host" else f"host: {reason}")
        )
        if reason and self.sampling == "auto":
            self._say_once(
                reason,
                f"pyspec: verify rows sampled on the host, not in llama.cpp's graph: {reason}",
            )

    def _detach_graph(self) -> None:
        graph, self._graph = self._graph, None
        if graph is not None:
            graph.detach()  # the context copies logits again (llama-cpp-python's loop needs them)

    def _say_once(self, key: str, message: str) -> None:
        if key not in self._reported:
            self._reported.add(key)
            log.warning("%s", message)

    def close(self):
        if self._closed:  # SpeculativeLlama.close and the Llama's own exit stack both call it
            return
        self._closed = True
        self.close_open_stream()
        self._detach_graph()
        self.drafter.close()
        self.decoder.close()

    def close_open_stream(self) -> None:
        stream, self.open_stream = self.open_stream, None
        if stream is not None:
            stream.close()  # runs the loop's cleanup now (statistics, cost cache, flags)

    def fallback(self, reason: str) -> SpeculationStats:
        if reason not in self._reported:
            self._reported.add(reason)
            log.warning(
                "pyspec: %s is not verified by the fused verifier yet; requests that use "
                "it run llama-cpp-python's plain decoding loop",
                reason,
            )
        self.last = SpeculationStats(fallback_reason=reason)
        self.prefix_reuse.forget()  # llama-cpp-python's loop evaluates into the context
        return self.last

    # ------------------------------------------------------------------------------------
    def _evaluate_prompt(self, tokens: list, stats: SpeculationStats, prompt_rows: bool) -> int:
        """Brings the target's KV cache to `tokens` (reusing the common prefix as
        ``prefix_reuse`` allows); returns the address of the logits after the last prompt
        token: llama.cpp's buffer, or the saved row of the same prompt's last evaluation.
        ``prompt_rows``: keep every evaluated prompt token's logits in ``scores`` (logprobs
        with echo)."""
        llama, reuse = self.llama, self.prefix_reuse
        common = 0
        if llama.n_tokens != self._left_n_tokens:  # something else evaluated since our last request
            reuse.forget()
        if llama.n_tokens > 0:
            cached = llama.input_ids[: llama.n_tokens]
            limit = min(len(cached), len(tokens))
            if limit:
                same = np.asarray(tokens[:limit]) == cached[:limit]
                common = limit if same.all() else int(np.argmin(same))
        t0 = time.perf_counter()
        repeat = reuse.repeat_of(tokens, common)
        if (
            repeat is not None
            and repeat.row is not None
            and not prompt_rows
            and self._graph is None
        ):
            # The same prompt again: its last row as it was computed, without a decode (a
            # replayed last token would give a one-token row that differs slightly).
            self._roll_back(len(tokens))
            self._prompt_row = repeat.row
            stats.prompt_seconds += time.perf_counter() - t0
            return repeat.row.ctypes.data
        # Otherwise evaluated as llama-cpp-python's own loop does (chunks of n_batch after the
        # cached prefix): a fresh prompt costs one decode, and its first token's logits are bit
        # for bit plain llama-cpp-python's. A repeat that needs the rows again (echo, or the
        # graph's own samples) is evaluated from where its first evaluation started.
        keep = repeat.start if repeat is not None else reuse.keep(common, len(tokens))
        self.decoder.remove_from(keep)
        reuse.removed_from(keep)
        llama.n_tokens = keep
        body = tokens[keep:]
        for i in range(0, len(body), llama.n_batch):
            chunk = body[i : i + llama.n_batch]
            n_outputs = len(chunk) if prompt_rows else 1
            first = self._decode(chunk, n_outputs)
            reuse.decoded(keep + i, len(chunk))
            addr = first + 4 * self.n_vocab * (n_outputs - 1)  # the chunk's last row
            if prompt_rows:
                self._keep_rows(first, keep + i, n_outputs)
        self._prompt_row = None if self._graph is not None else self._rows(addr, 1)[0].copy()
        reuse.save(tokens, keep, self._prompt_row)
        stats.prompt_seconds += time.perf_counter() - t0
        return addr

    def _keep_rows(self, addr: int, position: int, n: int) -> None:
        """Copies n logits rows into llama-cpp-python's ``scores[position:position + n]``
        (row p: the logits after the token at p), which its logprobs code reads."""
        self.llama.scores[position : position + n, :] = self._rows(addr, n)

    def _decode(self, batch: list, n_outputs: int) -> int:
        llama = self.llama
        n_past = llama.n_tokens
        self._first_output = len(batch) - n_outputs
        if self._graph is None:
            addr = self.decoder.decode(batch, n_past, n_outputs)
        else:  # output row j decides the token at n_past + first + j + 1
            self._graph.set_position(n_past + self._first_output + 1)
            self.decoder.decode_sampled(batch, n_past, n_outputs)
            addr = 0  # no host rows: the sampler holds the tokens
        llama.input_ids[n_past : n_past + len(batch)] = batch
        llama.n_tokens = n_past + len(batch)
        llama._requires_eval = True  # the context's logits are ours, not llama-cpp-python's
        return addr

    def _rows(self, addr: int, n: int) -> np.ndarray:
        """n logits rows of llama.cpp's buffer at ``addr``, in place."""
        flat = np.ctypeslib.as_array((ctypes.c_float * (n * self.n_vocab)).from_address(addr))
        return flat.reshape(n, self.n_vocab)

    @staticmethod
    def _follow_grammar(constraints: RowConstraints, drafts: list, probs) -> tuple:
        """(drafts to verify, grammar states per row, whether the last draft is forbidden).

        A draft the grammar forbids can never be accepted: no draft after it is verified.
        Point-mass drafts stop before it (the row emits its own sample anyway). Drafts
        drawn from known probabilities keep it: rejection sampling must see the draw it
        rejects, or the corrective token would come from the row's distribution instead of
        the residual norm(max(0, p - q)), and the output would be biased towards what the
        draft would have said."""
        n_allowed, states = constraints.follow(drafts)
        if n_allowed == len(drafts):
            return drafts, states, False
        if probs is None:
            return drafts[:n_allowed], states, False
        return drafts[: n_allowed + 1], states, True

    def _verify_constrained(
        self,
        constraints: RowConstraints,
        addr: int,
        n_rows: int,
        context: list,
        drafts: list,
        probs,
        states: list,
        forbidden: bool,
        params: SamplingParams,
        history,
    ):
        try:
            window = np.asarray(penalty_window(params, history)) if history else None
            rows = constraints.rows(
                self._rows(addr, n_rows), context, drafts, states, window, len(context)
            )
            if forbidden:  # the bonus row after a certain rejection: never read
                rows = np.concatenate([rows, rows[-1:]])
            result = verify(
                rows, drafts, probs, params=params, position=len(context), penalty_history=history
            )
            constraints.advance(states, result.n_accepted, int(result.tokens[-1]))
        except BaseException:
            constraints.discard(states)
            raise
        return result

    def _draft(self, context: list, room: int, params: SamplingParams, constraints=None):
        """Drafts for the next round and how many of them to verify: the free drafter's,
        where the cost model finds them worth verifying; else the costly drafter's, where
        its controller finds that it pays."""
        draft, k = Draft([]), 0
        drafter = self.free_drafter
        if drafter is not None:  # draft first, then let the cost model cut
            controller = self.controller
            limit = min(controller.draft_max, room)
            if not limit:
                draft = Draft([])
            elif constraints is not None and constraints.state is not None:
                draft = drafter.draft_constrained(
                    np.asarray(context), limit, params, len(context), constraints.allowed_run
                )
            else:
                draft = drafter.draft(np.asarray(context), limit, params, len(context))
            k = (
                controller.choose(
                    len(draft.tokens), draft.bucket, draft_cost=0.0, kinds=draft.token_kinds
                )
                if draft.tokens
                else 0
            )
        if not k and self.costly_drafter is not None:
            drafter, controller = self.costly_drafter, self.costly_controller
            k = controller.choose(room, catch_up=drafter.catch_up_tokens(context))
            if k:
                draft = drafter.draft(np.asarray(context), k, params, len(context))
        return draft, min(k, len(draft.tokens))

    # ---- the loop -----------------------------------------------------------------------
    def generate(
        self,
        tokens,
        params: SamplingParams,
        stopping_criteria=None,
        constraints: Optional[RowConstraints] = None,
    ):
        """The speculative loop. After the prompt's round, each round drafts (``_plan_round``),
        verifies (one target pass over the last token and the drafts, then the fused verifier:
        ``_verify_round``), rolls back the rejected drafts' KV cells, lets the cost model and
        the statistics observe it (``_observe``) and emits its tokens (``_emit``).
        ``constraints``: the request's grammar and logits processors (applied to every verify
        row; closed when the loop ends)."""
        req = self._start_request(tokens, params, stopping_criteria, constraints)
        try:
            pending, rows = self._prompt_round(req)
            while (yield from self._emit(req, pending, rows)):
                round_start = time.perf_counter()
                plan = self._plan_round(req)
                n_before = self.llama.n_tokens
                result, addr, r = self._verify_round(req, plan)
                self._roll_back(n_before + 1 + result.n_accepted)
                pending = [int(t) for t in result.tokens]
                r.round_seconds = time.perf_counter() - round_start
                self._observe(req, plan, r, pending)
                rows = [addr + 4 * self.n_vocab * j for j in range(len(pending))]
        finally:
            self._finish_request(req)

    def _start_request(
        self,
        tokens,
        params: SamplingParams,
        stopping_criteria,
        constraints: Optional[RowConstraints],
    ) -> "_Request":
        self.last = stats = SpeculationStats()
        tokens = [int(t) for t in tokens]
        if not tokens:
            raise InvalidInputError("generate needs at least one prompt token")
        llama = self.llama
        # llama-cpp-python's logprobs read the logits row of every emitted token (and, with
        # echo, of the prompt) from llama.scores: only copied when a request needs them.
        emitted_rows, prompt_rows = self.rows_for_request or (llama._logits_all, llama._logits_all)
        if emitted_rows and llama.scores.shape[0] < self.n_ctx:
            raise PyspecRuntimeError(
                f"llama.scores has {llama.scores.shape[0]} rows, logprobs need "
                f"{self.n_ctx}: enable_speculation sizes it; was it replaced?"
            )
        self.controller.new_request()  # acceptance depends on the text: the last one is a prior
        if self.costly_controller not in (None, self.controller):
            self.costly_controller.new_request()
        self.drafter.start_request()
        self.last_logprobs = []
        return _Request(
            params,
            constraints,
            stopping_criteria,
            stats,
            tokens,
            list(tokens),
            emitted_rows,
            prompt_rows,
            self.logprobs_request,
            self.last_logprobs,
        )

    def _prompt_round(self, req: "_Request") -> tuple:
        """Chooses where rows are sampled, evaluates the prompt and samples its first token:
        (the tokens to emit, the addresses of the rows that decided them)."""
        params, constraints = req.params, req.constraints
        self._choose_sampling(
            params,
            constraints,
            req.emitted_rows or req.prompt_rows,
            req.stopping_criteria,
            req.stats,
            req.logprobs_top,
        )
        graph = self._graph
        if graph is not None and params.penalties_on:
            graph.set_history([], [])  # the window starts with this call's output
        addr = self._evaluate_prompt(req.prompt, req.stats, req.prompt_rows)
        position = self.llama.n_tokens  # absolute position of the token being emitted
        t0 = time.perf_counter()
        if graph is not None:
            first = int(graph.read(self._first_output, 1)[0])
        elif constraints is None:
            first = int(
                verify_from_pointer(
                    addr, self.n_vocab, [], params=params, position=position
                ).tokens[0]
            )
        else:
            _, states = constraints.follow([])
            row = constraints.rows(self._rows(addr, 1), req.prompt, [], states, None, position)
            first = int(verify(row, [], params=params, position=position).tokens[0])
            constraints.advance(states, 0, first)
        req.stats.verify_seconds += time.perf_counter() - t0
        return [first], [addr]

    def _emit(self, req: "_Request", pending: list, rows: list):
        """Yields the tokens the last round decided (row j decided the token at
        len(context) + j); returns False when stopping_criteria ended the request."""
        if req.emitted_rows:
            self._keep_rows(rows[0], len(req.context) - 1, len(pending))
        for j, tok in enumerate(pending):
            if req.stopping_criteria is not None and req.stopping_criteria(
                np.asarray(req.context, dtype=np.intc), self._rows(rows[j], 1)[0]
            ):
                return False
            if req.logprobs_top is not None:
                req.logprobs.append(
                    (
                        tok,
                        self._graph.logprobs(j)
                        if self._graph is not None
                        else row_logprobs(
                            LogitsPointer(rows[j], self.n_vocab), tok, req.logprobs_top
                        ),
                    )
                )
            req.stats.emitted += 1
            req.context.append(tok)
            yield tok
        return True

    def _plan_round(self, req: "_Request") -> "_Plan":
        """The drafts of the next round, as the drafter, the cost model and the grammar
        leave them."""
        room = self.n_ctx - self.llama.n_tokens - 1  # KV cells left after the last token
        if room < 0:
            raise PyspecRuntimeError(f"context window of {self.n_ctx} tokens is full")
        draft, k = self._draft(req.context, room, req.params, req.constraints)
        plan = _Plan(draft, draft.tokens[:k], draft.probs, k)
        if req.constraints is not None:
            plan.drafts, plan.states, plan.forbidden = self._follow_grammar(
                req.constraints, plan.drafts, draft.probs
            )
            req.stats.grammar_cut += k - len(plan.drafts) + plan.forbidden
        if draft.probs is not None and len(plan.drafts) < len(draft.tokens):
            n = len(plan.drafts)
            plan.probs = type(draft.probs)(draft.probs.tokens[:n], draft.probs.probs[:n])
        return plan

    def _verify_round(self, req: "_Request", plan: "_Plan") -> tuple:
        """One target pass over the last token and the drafts, and the verify of its rows:
        (VerifyResult, address of the first row, the round's Round record so far)."""
        params, graph = req.params, self._graph
        # A forbidden draft kept for rejection sampling is never decoded: it is rejected
        # for certain, and nothing after it is read.
        batch = [req.context[-1]] + plan.drafts[: len(plan.drafts) - plan.forbidden]
        t0 = time.perf_counter()
        if graph is not None and params.penalties_on:
            graph.set_history(req.context[req.n_prompt :], plan.drafts)
        addr = self._decode(batch, len(batch))
        t1 = time.perf_counter()
        # The penalties look back on what this call generated (llama.cpp's sampler accepts
        # each sampled token; the prompt is not in its window).
        history = req.context[req.n_prompt :] if params.penalties_on else None
        if graph is not None:  # point-mass drafts: the rows' own samples decide
            n_accepted, emitted = point_mass_result(graph.read(0, len(batch)), plan.drafts)
            result = VerifyResult(n_accepted, np.asarray(emitted, dtype=np.int32))
        elif req.constraints is None:
            result = verify_from_pointer(
                addr,
                self.n_vocab,
                plan.drafts,
                plan.probs,
                params=params,
                position=len(req.context),
                penalty_history=history,
            )
        else:
            result = self._verify_constrained(
                req.constraints,
                addr,
                len(batch),
                req.context,
                plan.drafts,
                plan.probs,
                plan.states,
                plan.forbidden,
                params,
                history,
            )
        r = Round(
            bucket=plan.draft.bucket,
            offered=plan.n_offered,
            verified=len(plan.drafts),
            accepted=result.n_accepted,
            emitted=result.n_accepted + 1,
            batch=len(batch),
            target_seconds=t1 - t0,
            verify_seconds=time.perf_counter() - t1,
            draft_seconds=plan.draft.seconds,
            token_kinds=tuple(plan.draft.token_kinds or ()),
            predicted=self._controller_of(plan.draft).last_expected if plan.drafts else 0.0,
            costly=plan.draft.costly,
        )
        return result, addr, r

    def _roll_back(self, keep: int) -> None:
        """Drops the KV cells of the rejected drafts: the cache keeps `keep` tokens."""
        if keep < self.llama.n_tokens:
            self.decoder.remove_from(keep)
            self.prefix_reuse.removed_from(keep)
            self.llama.n_tokens = keep

    def _observe(self, req: "_Request", plan: "_Plan", r: Round, pending: list) -> None:
        """The round, to the cost model and the statistics."""
        draft = plan.draft
        if draft.costly:  # a costly drafter's own cost per token is modelled
            r.drafter_tokens = len(draft.tokens)
            r.drafter_seconds = (
                draft.seconds if draft.steady_seconds is None else draft.steady_seconds
            )
            r.catch_up_tokens, r.catch_up_seconds = draft.catch_up_tokens, draft.catch_up_seconds
        if not plan.drafts and draft.tokens:  # a plain round: was its draft right?
            r.shadow_match = draft.tokens[0] == pending[0]
        controller = self._controller_of(draft)
        controller.observe(r)
        # Beside a free drafter, the costly drafter's controller also sees the plain rounds:
        # the plain rate its rounds are held against, and what its loss budget earns.
        costly = self.costly_controller
        if costly is not None and costly is not controller and not r.speculative:
            costly.observe(r, costs=False)
        req.stats.add_round(r)

    def _controller_of(self, draft: Draft) -> DraftLengthController:
        return self.costly_controller if draft.costly else self.controller

    def _finish_request(self, req: "_Request") -> None:
        self._detach_graph()
        stats, constraints = req.stats, req.constraints
        if constraints is not None:
            stats.grammar_seconds += constraints.grammar_seconds
            stats.grammar_rows += constraints.grammar_rows
            stats.processor_seconds += constraints.processor_seconds
            constraints.close()
        stats.cost_model = self.controller.describe()
        if self.costly_controller not in (None, self.controller):
            stats.cost_model += (
                f" | {self.costly_drafter.name}: {self.costly_controller.describe()}"
            )
        self.drafter.end_request(req.context)
        if self.memory is not None:
            stats.memory_lookups = self.free_drafter.memory_lookups
            stats.memory_hits = self.free_drafter.memory_hits
            stats.memory_tokens = len(self.memory)
        self._left_n_tokens = self.llama.n_tokens  # what the next request may find cached
        self.total.add(stats)
        save_ratios(self._cost_file, self.controller.costs.shape_to_save())
        if self.costly_controller is not None:
            save_drafter_record(self._drafter_file, self.costly_controller.drafter_record())


@dataclass
class _Request:
    """One generate call's state, shared by the steps of the loop."""

    params: SamplingParams
    constraints: Optional[RowConstraints]
    stopping_criteria: object
    stats: SpeculationStats
    prompt: list
    context: list  # the prompt, then every token emitted so far
    emitted_rows: bool  # copy each emitted token's logits row into llama.scores (logprobs)
    prompt_rows: bool  # and every prompt token's (logprobs with echo)
    logprobs_top: Optional[int]  # pyspec answers logprobs itself: n_top per emitted token
    logprobs: list  # and each emitted token's (token, RowLogprobs) goes here

    @property
    def n_prompt(self) -> int:
        return len(self.prompt)


@dataclass
class _Plan:
    """A round's drafts, as the drafter, the cost model and the grammar left them."""

    draft: Draft
    drafts: list  # to verify; a grammar-forbidden last one is kept only for q
    probs: object  # their draft probabilities (None: point masses)
    n_offered: int  # drafts the cost model let through, before the grammar's cut
    states: Optional[list] = None  # grammar states per verify row
    forbidden: bool = False  # the last draft is forbidden (rejected for certain)


# llama-cpp-python's own defaults for generate's keyword arguments, read from its signature
# (as create_completion's are below), never copied: they follow the installed version.
_GENERATE_DEFAULTS = {
    name: param.default
    for name, param in inspect.signature(llama_cpp.Llama.generate).parameters.items()
    if param.default is not inspect.Parameter.empty
}


def _speculative_generate(self, tokens, **kwargs):
    """Drop-in for ``Llama.generate`` (same arguments, same tokens out, faster)."""
    spec: Speculation = self._pyspec
    args = dict(_GENERATE_DEFAULTS)
    args.update(kwargs)
    reason = _fallback_reason(self, args["typical_p"], args["mirostat_mode"], args["reset"])
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
        state = GrammarState.parse(self, args["grammar"]) if args["grammar"] is not None else None
        constraints = RowConstraints(
            params, spec.n_vocab, state, _processor_list(args["logits_processor"])
        )
    return spec.generate(tokens, params, args["stopping_criteria"], constraints)


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


_COMPLETION_SIGNATURE = inspect.signature(llama_cpp.Llama.create_completion)


def _speculative_create_completion(self, *args, **kwargs):
    """``Llama.create_completion`` with logprobs answered from the verifier's own rows.

    llama-cpp-python reads logprobs from ``scores``, which it fills only with
    ``logits_all=True`` (and then for every token, asked or not). Here the loop copies the
    rows of the emitted tokens (and with ``echo`` of the whole prompt, evaluated afresh so
    that no row is left from an earlier request) for the requests that ask for logprobs, and
    no row otherwise."""
    spec: Speculation = self._pyspec
    # A stream the caller abandoned (a client that left) is closed now, under the caller's
    # lock, so that its cleanup cannot run later, in another thread, over this request.
    spec.close_open_stream()
    bound = _COMPLETION_SIGNATURE.bind(self, *args, **kwargs)
    if _pyspec_answers_logprobs(self, bound):
        return _completion_with_own_logprobs(self, spec, bound)
    wants = bound.arguments.get("logprobs") is not None
    echo_rows = (
        wants
        and bool(bound.arguments.get("echo", False))
        and not bound.arguments.get("stream", False)
    )
    if wants and self.scores.shape[0] < spec.n_ctx:  # created with logits_all=False
        # numpy maps a large allocation lazily: only the rows written cost memory.
        self.scores = np.ndarray((spec.n_ctx, spec.n_vocab), dtype=np.single)
    if echo_rows:
        self.n_tokens = 0  # every prompt row is needed: nothing is taken from the cache

    def start():
        spec.rows_for_request = (wants, echo_rows)
        self._logits_all = spec.logits_all_setting or wants  # else llama-cpp-python refuses

    def finish():
        spec.rows_for_request = None
        self._logits_all = spec.logits_all_setting

    start()
    try:
        result = llama_cpp.Llama.create_completion(self, *args, **kwargs)
    except BaseException:
        finish()
        raise
    finish()
    if not isinstance(result, types.GeneratorType):
        return result

    def stream():  # llama-cpp-python's stream runs (and checks logprobs) when iterated
        start()  # another request may have run between the chunks of this one
        try:
            yield from result
        finally:
            finish()
            result.close()

    spec.open_stream = stream()
    return spec.open_stream


def _pyspec_answers_logprobs(llama, bound) -> bool:
    """Whether this create_completion's logprobs come from the loop's own records: asked,
    not streamed, without echo (those read llama-cpp-python's rows), and decoded by the
    speculative loop (not llama-cpp-python's, which a fallback would run)."""
    args = bound.arguments
    if args.get("logprobs") is None or args.get("stream") or args.get("echo"):
        return False
    return not _fallback_reason(llama, args.get("typical_p", 1.0), args.get("mirostat_mode", 0))


def _completion_with_own_logprobs(llama, spec: Speculation, bound):
    """create_completion with ``logprobs=n`` answered by pyspec: llama-cpp-python runs the
    request without logprobs (no rows kept, no n_vocab sort per token) while the loop
    records each emitted token's RowLogprobs, laid out afterwards in its format."""
    n_top = min(check_n_top(bound.arguments["logprobs"]), spec.n_vocab)
    bound.arguments["logprobs"] = None
    spec.logprobs_request = n_top
    spec.rows_for_request = (False, False)
    try:
        result = llama_cpp.Llama.create_completion(*bound.args, **bound.kwargs)
    finally:
        spec.logprobs_request = None
        spec.rows_for_request = None
    result["choices"][0]["logprobs"] = completion_logprobs(
        llama,
        bound.arguments["prompt"],
        spec.last_logprobs,
        result["usage"]["completion_tokens"],
        n_top,
    )
    return result


def _fallback_reason(llama, typical_p, mirostat_mode, reset: bool = True) -> str:
    """Why llama-cpp-python's own loop must decode a request ('' when pyspec's does)."""
    reason = unsupported_reason(typical_p=typical_p, mirostat_mode=mirostat_mode)
    if not reason and not reset:
        reason = "generate(reset=False)"
    if not reason and (
        getattr(llama, "_is_recurrent", False) or getattr(llama, "_is_hybrid", False)
    ):
        reason = "recurrent or hybrid models (their KV cells cannot be partly removed)"
    return reason


def enable_speculation(
    llama: llama_cpp.Llama,
    draft=None,
    *,
    draft_max: int = 16,
    draft_min: int = 0,
    draft_p_min: float = 0.0,
    adaptive: bool = True,
    sampling: str = "auto",
    reproducible: bool = False,
    memory=True,
) -> Speculation:
    """Switches an existing ``llama_cpp.Llama`` to speculative decoding in place.

    It must have been created without llama-cpp-python's own ``draft_model`` (whose loop
    forces ``logits_all``); pass that drafter here instead. Returns the Speculation state
    (statistics in ``.last`` and ``.total``). ``sampling``: see ``SpeculativeLlama``; a Llama
    created by llama-cpp-python directly has a context that samples one output per sequence
    in the graph, so "auto" verifies on the host there and "graph" raises."""
    if getattr(llama, "draft_model", None) is not None:
        raise InvalidInputError(
            "this Llama already has llama-cpp-python's draft_model; create it "
            "without one and pass the drafter to enable_speculation"
        )
    check_llama_build()  # the model is loaded, but its first call would crash
    spec = Speculation(
        llama,
        draft,
        draft_max=draft_max,
        draft_min=draft_min,
        draft_p_min=draft_p_min,
        adaptive=adaptive,
        sampling=sampling,
        reproducible=reproducible,
        memory=memory,
    )
    llama._pyspec = spec
    llama.generate = types.MethodType(_speculative_generate, llama)
    llama.create_completion = types.MethodType(_speculative_create_completion, llama)
    # Llama.close() (also from llama_cpp.server when it switches models) frees the drafter and
    # the batch first: the exit stack runs its callbacks last in, first out.
    llama._stack.callback(spec.close)
    return spec


class SpeculativeLlama(llama_cpp.Llama):
    """A ``llama_cpp.Llama`` that decodes speculatively with pyspec's fused verifier.

    >>> llm = SpeculativeLlama("target.gguf", draft="draft.gguf", n_ctx=4096)  # doctest: +SKIP
    >>> llm.create_completion("def fib(n):", max_tokens=64, temperature=0.0)  # doctest: +SKIP

    ``draft``: None or "lookup" (n-gram lookup in the prompt and output), a path to a small
    GGUF model with the same tokenizer, a ``llama_cpp.Llama``, a llama-cpp-python
    ``LlamaDraftModel`` (also accepted as ``draft_model=``), a pyspec ``Drafter``, or a list
    of two, free first: ``["lookup", "draft.gguf"]`` drafts with lookup and, where lookup
    has nothing worth verifying, with the draft model (one cost model decides both).
    ``draft_max``/``draft_min`` bound the draft length, chosen per round by a cost model
    unless ``adaptive=False``; ``draft_p_min`` stops a draft model's draft when its top
    token's probability falls below it. ``sampling``: ``"graph"`` samples the verify rows
    inside llama.cpp's graph (point-mass drafts or greedy; no grammar, logits processors,
    logprobs or stopping_criteria: such a request raises ``InvalidRequestError``); ``"host"``
    has llama.cpp copy the rows out and verifies them with libpyspec; ``"auto"`` (default)
    uses the graph when the model's logits are computed on a GPU and the request allows, the
    host otherwise, saying why once in the log. ``reproducible=True``: every request's rows
    are those a fresh object would compute, whatever the cache held (cached cells are kept
    only as whole n_batch chunks; see README "Seeds"); by default a seeded request repeated
    on the same object gives the same text, and one after other requests gives the same
    distribution. ``memory``: prompt lookup also searches the prompts and outputs of this
    object's earlier requests (True: up to 65,536 tokens, oldest out; an int: that many;
    False: off); only with adaptive lengths and not reproducible, whose promises a memory
    would break. Other keyword arguments go to ``llama_cpp.Llama``.
    Statistics: ``.speculation.last`` (last request) and ``.speculation.total``.
    """

    def __init__(
        self,
        model_path: str,
        *,
        draft=None,
        draft_max: int = 16,
        draft_min: int = 0,
        draft_p_min: float = 0.0,
        adaptive: bool = True,
        sampling: str = "auto",
        reproducible: bool = False,
        memory=True,
        **llama_kwargs,
    ):
        self._pyspec_closed = False
        memory_size(memory)  # before the model loads
        check_llama_build()  # before the model loads: an AMX build would crash on this CPU
        check_llama_threads(llama_kwargs)
        if llama_kwargs.get("draft_model") is not None:
            if draft is not None:
                raise InvalidInputError("pass either draft= or draft_model=, not both")
            draft = llama_kwargs.pop("draft_model")
        llama_kwargs.pop("draft_model", None)
        check_sampling_mode(sampling)  # before the model loads
        with _context_outputs_per_seq(draft_max + 1 if sampling != "host" else 0):
            super().__init__(model_path, **llama_kwargs)
        self.speculation = enable_speculation(
            self,
            draft,
            draft_max=draft_max,
            draft_min=draft_min,
            draft_p_min=draft_p_min,
            adaptive=adaptive,
            sampling=sampling,
            reproducible=reproducible,
            memory=memory,
        )

    def __call__(self, *args, **kwargs):
        if getattr(self, "_pyspec_closed", False):
            _raise_closed("__call__")
        return super().__call__(*args, **kwargs)

    def close(self):
        """Frees the model, context and drafter. Any later use of this object raises
        ``ClosedError`` (llama-cpp-python itself would read freed memory and crash)."""
        if getattr(self, "_pyspec_closed", False):
            return
        if not hasattr(self, "_stack"):  # __init__ failed before llama-cpp-python's part
            self._pyspec_closed = True
            return
        spec = getattr(self, "_pyspec", None)
        if spec is not None:
            spec.close()
        super().close()
        self._pyspec_closed = True
        # Every public method of Llama that reaches the freed model or context now raises.
        for name in _MODEL_METHODS:
            setattr(self, name, functools.partial(_raise_closed, name))


def model_output_on_gpu(llama: llama_cpp.Llama) -> bool:
    """Whether llama.cpp computes this model's logits on a GPU: a build that can offload, and
    n_gpu_layers above the layer count (llama.cpp offloads the output layer last)."""
    if not llama_cpp.llama_supports_gpu_offload():
        return False
    n_gpu_layers = int(llama.model_params.n_gpu_layers)
    return n_gpu_layers < 0 or n_gpu_layers > int(llama_cpp.llama_model_n_layer(llama.model))


_CONTEXT_PARAMS_LOCK = threading.Lock()


@contextlib.contextmanager
def _context_outputs_per_seq(n: int):
    """Creates llama.cpp contexts (inside this block) that can sample ``n`` outputs per
    sequence in the graph. llama-cpp-python builds its context parameters from
    ``llama_context_default_params()`` (n_outputs_max_per_seq = 1) and has no argument for
    it, so the defaults function is wrapped for the duration of the Llama's construction."""
    if not n:
        yield
        return
    module = llama_cpp.llama_cpp
    with _CONTEXT_PARAMS_LOCK:
        original = module.llama_context_default_params

        def with_outputs():
            params = original()
            params.n_outputs_max_per_seq = n
            return params

        module.llama_context_default_params = with_outputs
        try:
            yield
        finally:
            module.llama_context_default_params = original


def _raise_closed(name: str, *args, **kwargs):
    raise ClosedError(
        f"SpeculativeLlama.{name}: this model was closed (close() frees the model "
        f"and its context); create a new SpeculativeLlama to generate again"
    )


_MODEL_METHODS = tuple(
    name
    for name, member in vars(llama_cpp.Llama).items()
    if not name.startswith("_")
    and name != "close"
    and callable(member)
    and not isinstance(member, (staticmethod, classmethod))
)


def check_grammar(llama: llama_cpp.Llama, grammar) -> None:
    """llama-cpp-python hands a grammar to llama.cpp unparsed; one that does not parse gives
    a null sampler, and the next call crashes the process. Parse it first."""
    GrammarState.parse(llama, grammar).close()
