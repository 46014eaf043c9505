"""The speculative loop over one llama-cpp-python ``Llama``: ``Speculation`` holds what lives
as long as the model (the drafter, the cost models, the statistics, the KV-cache bookkeeping)
and runs each request, a ``Request`` passed down its steps, round by round.
"""

from __future__ import annotations

import ctypes
import logging
import math
import time
from typing import Optional

import llama_cpp
import numpy as np

from pyspec._native.abi import MAX_GRAPH_TOP
from pyspec.checks import penalty_window
from pyspec.errors import (
    GraphSamplerUnavailable,
    InvalidInputError,
    InvalidRequestError,
    PyspecError,
    PyspecRuntimeError,
)
from pyspec.llama.batch_decoder import BatchDecoder
from pyspec.llama.constraints.rows import RowConstraints
from pyspec.llama.context import model_output_on_gpu
from pyspec.llama.drafting.adaptive import (
    COSTLY_DRAFTER,
    FREE_DRAFTER,
    REMEMBERED_FLOOR,
    REPRODUCED_FLOOR,
    SURE_ABOVE,
    UNSURE_BELOW,
    UNSURE_WINDOW,
    DraftLengthController,
)
from pyspec.llama.drafting.base import Draft, filler_draft
from pyspec.llama.drafting.calibration import CONTEXT_TOKENS as CALIBRATION_CONTEXT
from pyspec.llama.drafting.calibration import PASSES as CALIBRATION_PASSES
from pyspec.llama.drafting.calibration import TEXT as CALIBRATION_TEXT
from pyspec.llama.drafting.calibration import measure_shape
from pyspec.llama.drafting.choice import size_ratio
from pyspec.llama.drafting.cost_cache import (
    cost_cache_file,
    drafter_cache_file,
    load_drafter_record,
    load_shape,
    save_drafter_record,
    save_ratios,
)
from pyspec.llama.drafting.costs import every_size_from_2, ratios_from, validate_ratios
from pyspec.llama.drafting.draft_model import DraftModel
from pyspec.llama.drafting.factory import make_drafter
from pyspec.llama.drafting.lookup import PromptLookup
from pyspec.llama.drafting.request_memory import RequestMemory
from pyspec.llama.graph.sampling import GraphSampler, graph_unavailable_reason, point_mass_result
from pyspec.llama.options import SpeculationOptions
from pyspec.llama.prefix_reuse import PrefixReuse
from pyspec.llama.request import CompletionOptions, Plan, Request
from pyspec.llama.rounds import Round
from pyspec.llama.stats import SpeculationStats
from pyspec.params import SamplingParams
from pyspec.request import LogitsPointer, VerifyResult
from pyspec.verifier import row_logprobs, verify, verify_from_pointer

log = logging.getLogger("pyspec")


class Speculation:
    """The speculative state attached to one Llama: drafter, controller, statistics."""

    def __init__(
        self,
        llama: llama_cpp.Llama,
        draft=None,
        options: Optional[SpeculationOptions] = None,
    ):
        self.options = options = options or SpeculationOptions()
        draft_max, draft_min, adaptive = options.draft_max, options.draft_min, options.adaptive
        sampling, memory_tokens = options.sampling, options.memory_tokens
        # "auto" samples in the graph where that saves a device-to-host copy of the rows: on a
        # model whose output layer runs on a GPU. On the CPU the rows are in host memory
        # already, and the host path measured faster (docs/in-graph-sampling.md).
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
        self.reproducible = bool(options.reproducible)
        self.drafter = make_drafter(draft, llama, options.draft_p_min)
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
        # The unsure rule: a free draft waits while the target was unsure of its last tokens
        # (adaptive.UNSURE_BELOW), read from the verifier's own pass over the rows it decides
        # anyway (top_probs). controller.unsure_below = None turns it off. Beside it the
        # sure-copy rule: a copy the output has followed for a while, offered while the
        # target was sure of its last tokens, is believed to go on (adaptive.SURE_ABOVE;
        # controller.sure_above = None turns it off).
        if self.free_drafter is not None and adaptive:
            self.controller.unsure_below = UNSURE_BELOW
            self.controller.sure_above = SURE_ABOVE
            self.controller.remembered_floor = REMEMBERED_FLOOR
            # The reproduction rule: a copy of prompt text the answer began with is believed
            # to go on (adaptive.REPRODUCED_FLOOR), up to the instruction's next word and the
            # copied text's end (lookup.py's mention stops). controller.reproduced_floor =
            # None turns the belief off, the lookup's read_with(None) its reading. Off in
            # session 36, when nothing stopped it at the edits of `pyspec demo`'s rename
            # (0.79x-0.96x the loop without it); with the stops it is 0.99x-1.19x there and
            # +2% to +6% on the 96-token edits (docs/drafting.md).
            self.controller.reproduced_floor = REPRODUCED_FLOOR
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
        self._left_n_tokens = -1  # llama.n_tokens when our last request ended
        self.n_vocab = llama.n_vocab()
        self.logits_all_setting = bool(llama._logits_all)  # what the user created it with
        self.open_stream = None  # the last streamed completion, until a new request starts
        self._closed = False
        # llama.cpp pads n_ctx up; llama-cpp-python's input_ids has the size asked for.
        self.n_ctx = min(llama.n_ctx(), len(llama.input_ids))
        self.total = SpeculationStats()
        self.last: Optional[SpeculationStats] = None
        self._reported: set = set()
        # The batch-cost shape an earlier process learned with this model and setup (or
        # measured at every size by ``calibrate``): a prior (validated on load) that this
        # process's own passes override.
        self._cost_file = cost_cache_file(llama) if adaptive else None
        cached, calibrated = load_shape(self._cost_file)
        if cached is not None:
            self.controller.use_cost_prior(
                cached, source=f"cache {self._cost_file.name}", calibrated=calibrated
            )
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
        self._active: Optional[Request] = None  # the request under way (for close())
        self.last_request: Optional[Request] = None  # the last one, as it ended (a record)
        # Told of each answer create_completion gives (pyspec serve files its statistics).
        self.listeners: list = []
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

    def _choose_sampling(self, req: Request) -> None:
        """Attaches the in-graph sampler to this request when it can be used (computing
        ``req.logprobs_top`` top logprobs per row when that is set)."""
        reason = self._host_reason(
            req.params,
            req.constraints,
            req.emitted_rows or req.prompt_rows,
            req.stopping_criteria,
            req.logprobs_top,
        )
        if not reason:
            try:
                req.graph = GraphSampler(
                    self.llama.ctx,
                    req.params,
                    self.controller.draft_max + 1,
                    n_top=req.logprobs_top,
                )
            except PyspecError as exc:  # GraphSamplerUnavailable among them
                if self.sampling == "graph":
                    raise
                reason = self.graph_unavailable = str(exc)
        if reason and self.sampling == "graph":
            raise InvalidRequestError(
                f"sampling='graph' cannot sample this request in the graph: "
                f"{reason}; use sampling='auto' or 'host'"
            )
        req.stats.sampling = (
            "graph"
            if req.graph is not None
            else ("host" if self.sampling == "host" else f"host: {reason}")
        )
        if reason and self.sampling == "auto":
            self._say_once(
                reason,
                f"pyspec: verify rows sampled on the host, not in llama.cpp's graph: {reason}",
            )

    @staticmethod
    def _detach_graph(req: Request) -> None:
        graph, req.graph = req.graph, None
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
        if self._active is not None:
            self._detach_graph(self._active)
        self.drafter.close()
        self.decoder.close()

    @property
    def cost_file(self):
        """Where this model and setup's batch-cost shape is kept (None: cache off, or fixed
        draft lengths)."""
        return self._cost_file

    def calibrate(self, progress=None, passes: int = CALIBRATION_PASSES) -> dict:
        """Measures the target's batch cost at every size a verify pass can have (up to
        draft_max + 1; ``calibration.measure_shape``), makes it the cost model's prior and
        writes it to the cost cache. Empties the target's KV cache (the next request
        evaluates its prompt afresh). Returns the shape (n -> cost(n) / cost(1))."""
        self.close_open_stream()
        if self._active is not None:
            raise PyspecRuntimeError("calibrate() while a request is being generated")
        largest = self._largest_verify_batch("calibrate()")
        if CALIBRATION_CONTEXT + largest > self.n_ctx:
            raise InvalidInputError(
                f"calibrate() decodes {largest} tokens after {CALIBRATION_CONTEXT} of context; "
                f"this context holds {self.n_ctx} (raise n_ctx)"
            )
        text = self.llama.tokenize(CALIBRATION_TEXT.encode(), add_bos=False)
        try:
            shape = measure_shape(self.decoder, text, largest, passes=passes, progress=progress)
        finally:
            self.llama.n_tokens = 0  # what llama-cpp-python believes the cache holds
            self.prefix_reuse.forget()
        problem = validate_ratios(shape, calibrated=True)
        if problem:
            raise PyspecRuntimeError(
                f"the measured batch costs are implausible ({problem}); the machine was "
                "probably busy: calibrate again when it is quiet"
            )
        # (validated above, every size measured: use_calibration's checks would repeat it)
        self.controller.use_cost_prior(shape, source="calibrated here", calibrated=True)
        save_ratios(self._cost_file, shape, calibrated=True)
        return shape

    def use_calibration(self, shape, source: str = "calibrated here") -> None:
        """Makes a shape that ``calibrate`` measured (n -> cost(n) / cost(1)), here or by
        another object with the same model and setup, this cost model's prior, believed with
        its dips, without measuring anything or writing the cost cache (a request in
        progress goes on with it). Sizes may be ints or digit strings (as JSON gives them
        back); size 1, one token over itself, is ignored. A shape that is not a mapping of
        sizes to costs, is implausible, or lacks a size a verify pass can have here, and an
        object whose draft length is fixed, raise InvalidInputError and change nothing."""
        largest = self._largest_verify_batch("use_calibration()")
        ratios, problem = ratios_from(shape)
        if not problem:
            problem = validate_ratios(ratios, calibrated=True)
        if not problem and not (every_size_from_2(ratios) and max(ratios) >= largest):
            problem = f"it does not hold every batch size from 2 to {largest} (draft_max + 1)"
        if problem:
            raise InvalidInputError(f"use_calibration(): not a calibrated shape here: {problem}")
        self.controller.use_cost_prior(ratios, source=source, calibrated=True)

    def _largest_verify_batch(self, caller: str) -> int:
        """draft_max + 1, the batch a calibration must reach; refused where the draft length
        is fixed or nothing is drafted (the batch costs decide nothing there)."""
        largest = self.controller.draft_max + 1
        if largest < 2 or self.controller.fixed:
            raise InvalidInputError(
                f"{caller} needs adaptive draft lengths and draft_max >= 1: the batch costs "
                "decide nothing otherwise"
            )
        return largest

    def close_open_stream(self) -> None:
        stream, self.open_stream = self.open_stream, None
        if stream is not None:
            stream.close()  # runs the loop's cleanup now (statistics, cost cache, flags)

    def answer_started(self, completion_id: str, stats: SpeculationStats) -> None:
        """A create_completion answer (or the first chunk of a stream) is out."""
        for listener in self.listeners:
            listener.answer_started(completion_id, stats)

    def answer_ended(self, stats: SpeculationStats) -> None:
        """That answer is complete (a stream: its last chunk went, or it was abandoned)."""
        for listener in self.listeners:
            listener.answer_ended(stats)

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
    def _evaluate_prompt(self, req: Request) -> int:
        """Brings the target's KV cache to the request's prompt (reusing the common prefix as
        ``prefix_reuse`` allows); returns the address of the logits after the last prompt
        token: llama.cpp's buffer, or the saved row of the same prompt's last evaluation.
        ``req.prompt_rows``: keep every evaluated prompt token's logits in ``scores``
        (logprobs with echo)."""
        llama, reuse = self.llama, self.prefix_reuse
        tokens, stats, prompt_rows = req.prompt, req.stats, req.prompt_rows
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
        if repeat is not None and repeat.row is not None and not prompt_rows and req.graph is None:
            # The same prompt again: its last row as it was computed, without a decode (a
            # replayed last token would give a one-token row that differs slightly).
            self._roll_back(len(tokens))
            req.prompt_row = repeat.row
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
            first = self._decode(req, chunk, n_outputs)
            reuse.decoded(keep + i, len(chunk))
            addr = first + 4 * self.n_vocab * (n_outputs - 1)  # the chunk's last row
            if prompt_rows:
                self._keep_rows(first, keep + i, n_outputs)
        req.prompt_row = None if req.graph is not None else self._rows(addr, 1)[0].copy()
        reuse.save(tokens, keep, req.prompt_row)
        stats.prompt_seconds += time.perf_counter() - t0
        return addr

    def _keep_rows(self, addr: int, position: int, n: int) -> None:
        """Copies n logits rows into llama-cpp-python's ``scores[position:position + n]``
        (row p: the logits after the token at p), which its logprobs code reads."""
        self.llama.scores[position : position + n, :] = self._rows(addr, n)

    def _decode(self, req: Request, batch: list, n_outputs: int) -> int:
        llama = self.llama
        n_past = llama.n_tokens
        req.first_output = len(batch) - n_outputs
        if req.graph is None:
            addr = self.decoder.decode(batch, n_past, n_outputs)
        else:  # output row j decides the token at n_past + first + j + 1
            req.graph.set_position(n_past + req.first_output + 1)
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
        self, req: Request, plan: Plan, addr: int, n_rows: int, history
    ) -> VerifyResult:
        """The fused verifier over the rows as the request's grammar and logits processors
        leave them (the grammar states advance by what was emitted)."""
        constraints, params = req.constraints, req.params
        try:
            window = np.asarray(penalty_window(params, history)) if history else None
            rows = constraints.rows(
                self._rows(addr, n_rows),
                req.context,
                plan.drafts,
                plan.states,
                window,
                len(req.context),
            )
            if plan.forbidden:  # the bonus row after a certain rejection: never read
                rows = np.concatenate([rows, rows[-1:]])
            result = verify(
                rows,
                plan.drafts,
                plan.probs,
                params=params,
                position=len(req.context),
                penalty_history=history,
            )
            constraints.advance(plan.states, result.n_accepted, int(result.tokens[-1]))
        except BaseException:
            constraints.discard(plan.states)
            raise
        return result

    def _decide(self, req: Request, plan: Plan, addr: int, n_rows: int) -> VerifyResult:
        """What the ``n_rows`` rows at ``addr`` decide for the plan's drafts (none in the
        prompt's round): the rows' own samples, in the graph (point-mass drafts); else the
        fused verifier over llama.cpp's rows, as they are or as the request's grammar and
        logits processors change them. The penalties look back on what this call generated
        (llama.cpp's sampler accepts each sampled token; the prompt is not in its window)."""
        params = req.params
        history = (req.context[req.n_prompt :] if params.penalties_on else None) or None
        if req.graph is not None:
            sampled = req.graph.read(req.first_output, n_rows)
            n_accepted, emitted = point_mass_result(sampled, plan.drafts)
            return VerifyResult(n_accepted, np.asarray(emitted, dtype=np.int32))
        if req.constraints is None:
            return verify_from_pointer(
                addr,
                self.n_vocab,
                plan.drafts,
                plan.probs,
                params=params,
                position=len(req.context),
                penalty_history=history,
                top_probs=self._reads_confidence,
            )
        return self._verify_constrained(req, plan, addr, n_rows, history)

    def _note_confidence(self, req: Request, result: VerifyResult, addr: int) -> None:
        """With the unsure or sure-copy rule on, how sure the target was of the tokens a
        round decided (the top probability of each row, from the raw rows at ``addr``): the
        verifier's own pass gives them (``top_probs``); a grammar's rows, which it verifies
        changed, are read raw here, on the host (``pyspec.row_logprobs``). The in-graph
        sampler keeps its rows on its side: nothing to read."""
        if req.graph is not None or not self._reads_confidence:
            return
        n = len(result.tokens)
        tops = result.top_probs
        if tops is None:
            tops = [
                math.exp(
                    float(
                        row_logprobs(
                            LogitsPointer(addr + 4 * self.n_vocab * j, self.n_vocab), None, 1
                        ).top_logprobs[0]
                    )
                )
                for j in range(max(0, n - UNSURE_WINDOW), n)
            ]
        req.confidence.extend(float(t) for t in tops[-UNSURE_WINDOW:])

    def _draft(
        self,
        context: list,
        room: int,
        params: SamplingParams,
        constraints=None,
        confidence: Optional[float] = None,
    ):
        """Drafts for the next round and how many of them to verify: the free drafter's,
        where the cost model finds them worth verifying (and, with the unsure rule on, the
        target was not unsure of its last tokens: ``confidence``); else the costly
        drafter's, where its controller finds that it pays. The round's Plan, before a
        grammar's cut, with whether the free draft was held back because the target was
        unsure, or verified as a sure copy, and how many of its tokens the remembered-copy
        and reproduction rules believed."""
        draft, k, held_back, sure_copy, remembered = Draft([]), 0, False, False, 0
        reproduced = 0
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
            if not draft.tokens and limit and controller.verifying_is_cheaper():
                draft = filler_draft(context)  # (verified for less than a plain pass)
            # (room + 1: the tokens the request may still emit, its last from the last pass)
            k = controller.choose_free(draft, confidence, remaining=room + 1)
            held_back, sure_copy = controller.held_back, controller.sure_copy
            remembered = controller.remembered_tokens
            reproduced = controller.reproduced_tokens
        if not k and self.costly_drafter is not None:
            drafter, controller = self.costly_drafter, self.costly_controller
            k = controller.choose(room, catch_up=drafter.catch_up_tokens(context))
            if k:
                draft = drafter.draft(np.asarray(context), k, params, len(context))
        k = min(k, len(draft.tokens))
        return Plan(
            draft,
            draft.tokens[:k],
            draft.probs,
            k,
            held_back=held_back,
            sure_copy=sure_copy,
            remembered=remembered,
            reproduced=reproduced,
        )

    # ---- the loop -----------------------------------------------------------------------
    def generate(
        self,
        tokens,
        params: SamplingParams,
        stopping_criteria=None,
        constraints: Optional[RowConstraints] = None,
        options: Optional[CompletionOptions] = None,
    ):
        """The speculative loop. The prompt's round evaluates the prompt and samples its first
        token (``_prompt_round``); then each round drafts (``_plan_round``), verifies (one
        target pass over the last token and the drafts, then the fused verifier:
        ``_verify_round``), rolls back the rejected drafts' KV cells, lets the cost model and
        the statistics observe it (``_observe``) and emits its tokens (``_emit``).
        ``constraints``: the request's grammar and logits processors (applied to every verify
        row; closed when the loop ends). ``options``: what create_completion asked (None: a
        direct generate call)."""
        req = self._start_request(tokens, params, stopping_criteria, constraints, options)
        try:
            pending, rows = self._prompt_round(req)
            while (yield from self._emit(req, pending, rows)):
                round_start = time.perf_counter()
                plan = self._plan_round(req)
                n_before = self.llama.n_tokens
                result, addr, r = self._verify_round(req, plan)
                self._note_confidence(req, result, addr)
                self._roll_back(n_before + 1 + result.n_accepted)
                pending = [int(t) for t in result.tokens]
                r.round_seconds = time.perf_counter() - round_start
                self._observe(req, plan, r, pending)
                rows = [addr + 4 * self.n_vocab * j for j in range(len(pending))]
        finally:
            self._finish_request(req)

    @property
    def tokens_ready(self) -> int:
        """Tokens of the request under way that its last round decided and generate has not
        yielded yet (0 between requests): asking for them decodes nothing."""
        return self._active.ready if self._active is not None else 0

    @property
    def rounds_done(self) -> int:
        """Decoding rounds of the request under way so far (-1 between requests): a chunk
        made after this changed came of a new decode."""
        req = self._active
        return req.stats.steps if req is not None else -1

    def _start_request(
        self,
        tokens,
        params: SamplingParams,
        stopping_criteria,
        constraints: Optional[RowConstraints],
        options: Optional[CompletionOptions],
    ) -> Request:
        # (draft_max 0: pyspec serve's --no-draft, generate's --no-draft: no drafts at all)
        drafter = self.drafter.name if self.controller.draft_max > 0 else "none"
        self.last = stats = SpeculationStats(drafter=drafter)
        tokens = [int(t) for t in tokens]
        if not tokens:
            raise InvalidInputError("generate needs at least one prompt token")
        llama = self.llama
        # llama-cpp-python's logprobs read the logits row of every emitted token (and, with
        # echo, of the prompt) from llama.scores: only copied when a request needs them.
        if options is None:  # a direct generate call: the Llama's logits_all decides
            options = CompletionOptions(llama._logits_all, llama._logits_all)
        if options.emitted_rows and llama.scores.shape[0] < self.n_ctx:
            raise PyspecRuntimeError(
                f"llama.scores has {llama.scores.shape[0]} rows, logprobs need "
                f"{self.n_ctx}: enable_speculation sizes it; was it replaced?"
            )
        self.controller.new_request()  # acceptance depends on the text: the last one is a prior
        if self.costly_controller not in (None, self.controller):
            self.costly_controller.new_request()
        self.drafter.start_request()
        self._active = Request(
            params,
            constraints,
            stopping_criteria,
            stats,
            tokens,
            list(tokens),
            options.emitted_rows,
            options.prompt_rows,
            options.logprobs_top,
            options.logprobs,
            max_tokens=options.max_tokens,
        )
        return self._active

    def _prompt_round(self, req: Request) -> tuple:
        """The prompt's round: chooses where rows are sampled and evaluates the prompt; its
        last row then decides the first token as a verify round with no drafts decides its
        bonus token. (the tokens to emit, the addresses of the rows that decided them)."""
        self._choose_sampling(req)
        if req.graph is not None and req.params.penalties_on:
            req.graph.set_history([], [])  # the window starts with this call's output
        addr = self._evaluate_prompt(req)
        plan = Plan.empty()
        if req.constraints is not None:
            plan.drafts, plan.states, plan.forbidden = self._follow_grammar(
                req.constraints, [], None
            )
        t0 = time.perf_counter()
        result = self._decide(req, plan, addr, 1)
        req.stats.verify_seconds += time.perf_counter() - t0
        self._note_confidence(req, result, addr)
        return [int(result.tokens[0])], [addr]

    def _emit(self, req: Request, pending: list, rows: list):
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
                        req.graph.logprobs(j)
                        if req.graph is not None
                        else row_logprobs(
                            LogitsPointer(rows[j], self.n_vocab), tok, req.logprobs_top
                        ),
                    )
                )
            req.stats.emitted += 1
            req.context.append(tok)
            req.ready = len(pending) - j - 1
            yield tok
        req.ready = 0
        return True

    def _plan_round(self, req: Request) -> Plan:
        """The drafts of the next round, as the drafter, the cost model and the grammar
        leave them."""
        room = self.n_ctx - self.llama.n_tokens - 1  # KV cells left after the last token
        if room < 0:
            raise PyspecRuntimeError(f"context window of {self.n_ctx} tokens is full")
        if req.max_tokens is not None:  # a round emits at most its drafts and one token more
            room = min(room, max(req.max_tokens - req.stats.emitted - 1, 0))
        confidence = min(req.confidence) if req.confidence else None
        plan = self._draft(req.context, room, req.params, req.constraints, confidence)
        draft, k = plan.draft, plan.n_offered
        if req.constraints is not None:
            plan.drafts, plan.states, plan.forbidden = self._follow_grammar(
                req.constraints, plan.drafts, draft.probs
            )
            req.stats.grammar_cut += k - len(plan.drafts) + plan.forbidden
        if draft.probs is not None and len(plan.drafts) < len(draft.tokens):
            n = len(plan.drafts)
            plan.probs = type(draft.probs)(draft.probs.tokens[:n], draft.probs.probs[:n])
        return plan

    def _verify_round(self, req: Request, plan: Plan) -> tuple:
        """One target pass over the last token and the drafts, and the verify of its rows:
        (VerifyResult, address of the first row, the round's Round record so far)."""
        # A forbidden draft kept for rejection sampling is never decoded: it is rejected
        # for certain, and nothing after it is read.
        batch = [req.context[-1]] + plan.drafts[: len(plan.drafts) - plan.forbidden]
        t0 = time.perf_counter()
        if req.graph is not None and req.params.penalties_on:
            req.graph.set_history(req.context[req.n_prompt :], plan.drafts)
        addr = self._decode(req, batch, len(batch))
        t1 = time.perf_counter()
        result = self._decide(req, plan, addr, len(batch))
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
            held_back=plan.held_back,
            sure_copy=plan.sure_copy and bool(plan.drafts),  # (a grammar may cut them all)
            remembered=min(plan.remembered, len(plan.drafts)),
            reproduced=min(plan.reproduced, len(plan.drafts)),
        )
        return result, addr, r

    def _roll_back(self, keep: int) -> None:
        """Drops the KV cells of the rejected drafts: the cache keeps `keep` tokens."""
        if keep < self.llama.n_tokens:
            self.decoder.remove_from(keep)
            self.prefix_reuse.removed_from(keep)
            self.llama.n_tokens = keep

    def _observe(self, req: Request, plan: Plan, r: Round, pending: list) -> None:
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

    @property
    def _reads_confidence(self) -> bool:
        """Whether each round reads the target's confidence in its last tokens (the top of
        each row that decided one, from the verifier's pass: 0.01-0.05 ms a round on this
        Zen 4, against 0.2 ms when a second pass per row read it): only with the unsure, the
        sure-copy, the remembered-copy or the reproduction rule on (DraftLengthController.
        unsure_below, sure_above, remembered_floor, reproduced_floor: the defaults beside a
        free drafter) and a free drafter's adaptive lengths."""
        c = self.controller
        return (
            self.free_drafter is not None
            and (
                c.unsure_below is not None
                or c.sure_above is not None
                or c.remembered_floor is not None
                or c.reproduced_floor is not None
            )
            and not c.fixed
            and c.draft_max > 0  # (draft_max 0: nothing to hold back)
        )

    def _controller_of(self, draft: Draft) -> DraftLengthController:
        return self.costly_controller if draft.costly else self.controller

    def _finish_request(self, req: Request) -> None:
        self._active, self.last_request = None, req
        self._detach_graph(req)
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
        self.drafter.end_request(req.context, req.n_prompt)
        if self.memory is not None:
            stats.memory_lookups = self.free_drafter.memory_lookups
            stats.memory_hits = self.free_drafter.memory_hits
            stats.memory_tokens = len(self.memory)
        self._left_n_tokens = self.llama.n_tokens  # what the next request may find cached
        self.total.add(stats)
        costs = self.controller.costs
        save_ratios(self._cost_file, costs.shape_to_save(), calibrated=costs.calibrated)
        if self.costly_controller is not None:
            save_drafter_record(self._drafter_file, self.costly_controller.drafter_record())
