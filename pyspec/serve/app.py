"""pyspec serve's app: llama_cpp.server's own FastAPI app, with speculative models.

Nothing of llama_cpp.server is re-implemented: its app factory builds the routes, request
models, locks and error handling. pyspec changes these things:
- the model loader: llama_cpp.server builds its model proxy from the module's ``LlamaProxy``
  name; pyspec points that name at a subclass whose loader calls llama-cpp-python's own and
  then ``enable_speculation`` with the model's ``draft`` settings;
- every model is loaded and run on one thread of its own (``compute_thread``: llama.cpp's
  OpenMP teams slow every decode once several threads have decoded);
- every completion (streamed or not, chat or not) carries the request's speculation
  statistics in an extra ``"pyspec"`` field (added by an ASGI middleware: OpenAI clients
  ignore unknown fields; the openai package exposes it as ``response.model_extra``);
- ``GET /metrics``: cumulative statistics in Prometheus' text format;
- bad requests get a 400 with the reason (``invalid_request_error``, as OpenAI's API answers)
  where llama_cpp.server's route handler would answer 500 for every exception that its
  message patterns do not know: a request body that fails validation, a bad sampling
  parameter, a grammar that does not parse.
"""

from __future__ import annotations

import os
from typing import Optional

import llama_cpp
import llama_cpp.server.app as server_app
from llama_cpp.server.model import LlamaProxy

from pyspec.llama import compute_thread, enable_speculation
from pyspec.llama.drafting.calibration import calibrate_once
from pyspec.llama.huge_pages import into_huge_pages, read_weights_in
from pyspec.llama.model import move_to_compute_thread
from pyspec.serve.metrics import Metrics
from pyspec.serve.request_body import JsonBodyMiddleware
from pyspec.serve.response_stats import ResponseStatsMiddleware, StatsById


def _describe(alias: str, llama: llama_cpp.Llama, settings) -> str:
    import pyspec

    spec = llama.speculation
    drafter = (
        "none (plain decoding through pyspec's loop)"
        if settings.draft == "none"
        else f"{spec.drafter.name} ({settings.draft})"
    )
    return (
        f"pyspec serve: model {alias} ({settings.model}), drafter {drafter}, draft length "
        f"{settings.draft_min}-{spec.controller.draft_max} "
        f"({'adaptive' if settings.adaptive else 'fixed'}), sampling on the host with "
        f"pyspec's fused verifier ({pyspec.SIMD}), {_threads(llama.context_params.n_threads)}, "
        f"n_ctx {llama.n_ctx()}"
        + (
            ", reproducible (cached cells kept as whole n_batch chunks)"
            if spec.reproducible
            else ""
        )
        + (
            f", a memory of earlier requests ({spec.memory.max_tokens} tokens)"
            if spec.memory is not None
            else ""
        )
    )


def _threads(n: int) -> str:
    return f"{n} thread" if n == 1 else f"{n} threads"


def drafter_setting(draft: str):
    """A model's ``draft`` setting as enable_speculation takes it: "lookup,draft.gguf" (free
    drafts first, the draft model where they have nothing) is a list."""
    parts = [p.strip() for p in draft.split(",")] if "," in draft else [draft]
    return parts if len(parts) > 1 else parts[0]


def weights_read_in(settings):
    """The model settings with ``use_mmap=False`` where the weights will go into 2 MB pages
    and the settings did not choose (huge_pages.py: the weights llama.cpp does not repack
    reach them only from memory), else as they were."""
    if "use_mmap" in settings.model_fields_set or not read_weights_in():
        return settings
    return settings.model_copy(update={"use_mmap": False})


class SpeculativeLlamaProxy(LlamaProxy):
    """llama_cpp.server's model proxy, loading every model as a speculative one."""

    stats_by_id = StatsById()
    metrics = Metrics()

    @staticmethod
    def load_llama_from_model_settings(settings) -> llama_cpp.Llama:
        # loaded, calibrated and run on one thread: llama.cpp's OpenMP teams (compute_thread)
        llama = compute_thread.run(SpeculativeLlamaProxy._load, settings)
        move_to_compute_thread(llama)
        # a round's tokens streamed as one chunk: llama_cpp.server's work per chunk shares
        # the decode's cores (pyspec/llama/stream_chunks.py). Not for the functionary chat
        # handlers, whose streams look for a "\n" chunk of its own, token by token.
        chat_format = str(getattr(settings, "chat_format", None) or "")
        llama._pyspec_coalesce_stream = not chat_format.startswith("functionary")
        return llama

    @staticmethod
    def _load(settings) -> llama_cpp.Llama:
        settings = weights_read_in(settings)
        with into_huge_pages() as pages:  # (PYSPEC_HUGE_PAGES=off leaves them)
            llama = LlamaProxy.load_llama_from_model_settings(settings)
        llama.huge_pages = pages
        print(f"pyspec: {pages.describe()}", flush=True)
        none = settings.draft == "none"
        try:
            enable_speculation(
                llama,
                "lookup" if none else drafter_setting(settings.draft),
                draft_max=0 if none else settings.draft_max,
                draft_min=0 if none else settings.draft_min,
                draft_p_min=settings.draft_p_min,
                adaptive=settings.adaptive,
                reproducible=settings.reproducible,
                memory=settings.memory,
            )
            if settings.calibrate and not none:  # once per model and setup (cost cache)
                calibrate_once(
                    llama, lambda line: print(line, flush=True), skip="--calibrate false"
                )
        except BaseException:
            llama.close()
            raise
        alias = settings.model_alias or settings.model
        llama.speculation.listeners.append(_AnswerRecorder(alias))
        print(_describe(alias, llama, settings), flush=True)  # once, at start-up and on a switch
        return llama


class _AnswerRecorder:
    """Files each answer's statistics under its completion id (which the response middleware
    reads) and adds them to the metrics when the answer is complete."""

    def __init__(self, alias: str):
        self.alias = alias

    def answer_started(self, completion_id: str, stats) -> None:
        SpeculativeLlamaProxy.stats_by_id.put(completion_id, stats)

    def answer_ended(self, stats) -> None:
        SpeculativeLlamaProxy.metrics.add(self.alias, stats)


def _invalid_request(error) -> Optional[str]:
    """The client's mistake in words, or None when the error is the server's."""
    from fastapi.exceptions import RequestValidationError

    if isinstance(error, RequestValidationError):
        parts = []
        for e in error.errors():
            where = ".".join(str(x) for x in e.get("loc", ())[1:]) or "body"
            parts.append(f"{where}: {e.get('msg', 'invalid')}")
        return "invalid request: " + "; ".join(parts)
    from pydantic import ValidationError

    from pyspec.errors import InvalidRequestError

    if isinstance(error, ValidationError):  # a request model built inside the route
        return f"invalid request: {error}"
    if isinstance(error, InvalidRequestError):  # pyspec's checks of the request's own values
        return f"invalid request: {error}"
    return None  # anything else is the server's fault: llama_cpp.server's 500, with a trace


def _route_errors_as_400(handler_class) -> None:
    """llama_cpp.server's RouteErrorHandler answers 500 to every exception its message
    patterns do not match (context length, missing model); the client's mistakes get 400."""
    if getattr(handler_class, "_pyspec_wrapped", False):
        return
    original = handler_class.error_message_wrapper

    def error_message_wrapper(self, error, body=None):
        known = any(p.search(str(error)) for p in self.pattern_and_formatters)
        message = None if known else _invalid_request(error)
        if message is None:
            return original(self, error, body)
        return 400, {
            "message": message,
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }

    handler_class.error_message_wrapper = error_message_wrapper
    handler_class._pyspec_wrapped = True


def create_app(server_settings, model_settings):
    """llama_cpp.server's app serving ``model_settings`` (SpeculativeModelSettings) with
    speculative decoding, plus the statistics field and ``/metrics``."""
    from llama_cpp.server.errors import RouteErrorHandler

    server_app.LlamaProxy = SpeculativeLlamaProxy
    _route_errors_as_400(RouteErrorHandler)
    # llama_cpp.server's factory would read a CONFIG_FILE again with its own settings models
    # (no draft keys, its defaults); pyspec serve has read it already (load_settings).
    os.environ.pop("CONFIG_FILE", None)
    app = server_app.create_app(server_settings=server_settings, model_settings=model_settings)
    app.add_middleware(ResponseStatsMiddleware, stats_by_id=SpeculativeLlamaProxy.stats_by_id)
    app.add_middleware(JsonBodyMiddleware)
    metrics = SpeculativeLlamaProxy.metrics

    from fastapi.responses import PlainTextResponse

    async def prometheus_metrics():
        return PlainTextResponse(
            metrics.prometheus_text(), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    app.add_api_route(
        "/metrics",
        prometheus_metrics,
        methods=["GET"],
        summary="pyspec's cumulative speculation statistics (Prometheus text)",
    )
    return app
