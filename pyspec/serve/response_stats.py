"""The ``"pyspec"`` field of every completion: the request's speculation statistics.

llama_cpp.server serialises completions through response models that would drop an unknown
key, and its chat handlers rebuild the completion dict, so the field is added on the way out,
in the HTTP body: an ASGI middleware reads each JSON answer (or each streamed event), looks
the completion id up in ``StatsById`` (filed by the model's create_completion), and adds the
statistics: to the whole answer, or to the streamed chunk that carries the finish reason.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Optional

from pyspec.llama.stats import SpeculationStats

COMPLETION_PATHS = (
    "/v1/completions",
    "/v1/chat/completions",
    "/v1/engines/copilot-codex/completions",
)


def response_fields(stats: SpeculationStats) -> dict:
    """The documented ``"pyspec"`` field (docs/serving.md)."""
    return {
        "speculative": not stats.fallback_reason,
        "fallback_reason": stats.fallback_reason or None,
        "drafted_tokens": stats.drafted,
        "accepted_tokens": stats.accepted,
        "acceptance_rate": round(stats.acceptance_rate, 4),
        "verify_steps": stats.verify_steps,
        "plain_steps": stats.plain_steps,
        "tokens_per_step": round(stats.tokens_per_verify_step, 3),
        "decode_tokens_per_second": round(stats.decode_rate, 2),
        "drafter": stats.drafter or None,
        "seconds": {
            "prompt": round(stats.prompt_seconds, 4),
            "draft": round(stats.draft_seconds, 4),
            "target": round(stats.target_seconds, 4),
            "verify": round(stats.verify_seconds, 4),
        },
    }


class StatsById:
    """The statistics of the last completions, by completion id (bounded: old ones go)."""

    def __init__(self, capacity: int = 256):
        self.capacity = capacity
        self._items: "OrderedDict[str, SpeculationStats]" = OrderedDict()
        self._lock = threading.Lock()  # the model runs in a worker thread, the middleware not

    def put(self, completion_id: str, stats: SpeculationStats) -> None:
        with self._lock:
            self._items[completion_id] = stats
            self._items.move_to_end(completion_id)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def get(self, response_id: str) -> Optional[SpeculationStats]:
        # chat completions are named "chat" + the completion's id
        key = response_id[4:] if response_id.startswith("chatcmpl-") else response_id
        with self._lock:
            return self._items.get(key)


def _with_stats(answer, stats_by_id: StatsById, streamed: bool):
    """The answer with its "pyspec" field, or None when it is not a completion of ours."""
    if not isinstance(answer, dict) or not isinstance(answer.get("id"), str):
        return None
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices:
        return None
    if streamed and not any(isinstance(c, dict) and c.get("finish_reason") for c in choices):
        return None  # a streamed answer carries the field once, on its last chunk
    stats = stats_by_id.get(answer["id"])
    if stats is None:
        return None
    return {**answer, "pyspec": response_fields(stats)}


# How llama_cpp.server's json.dumps writes a chunk that is not an answer's last. Within the
# generated text a quote is escaped (\"), so these bytes can only be the key itself.
_NOT_LAST = b'"finish_reason": null'


def _sse_with_stats(body: bytes, stats_by_id: StatsById) -> bytes:
    # Every streamed token passes here, in the event loop that also serves the stream and
    # shares 2 cores with the decode: a chunk that cannot carry the field is not parsed (a
    # JSON parse of each chunk was 13% of the loop's busy time on a Zen 5, session 50).
    if _NOT_LAST in body and body.count(b"data: ") == 1:
        return body
    lines = body.split(b"\n")
    for i, line in enumerate(lines):
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        try:
            chunk = json.loads(line[6:])
        except ValueError:
            continue
        updated = _with_stats(chunk, stats_by_id, streamed=True)
        if updated is not None:
            lines[i] = b"data: " + json.dumps(updated).encode()
    return b"\n".join(lines)


class ResponseStatsMiddleware:
    """Adds the ``"pyspec"`` field to completion answers (pure ASGI: works for streams)."""

    def __init__(self, app, stats_by_id: StatsById):
        self.app = app
        self.stats_by_id = stats_by_id

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].endswith(COMPLETION_PATHS):
            await self.app(scope, receive, send)
            return
        state = {"kind": None, "start": None, "body": []}

        async def send_with_stats(message):
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers", []))
                ctype = headers.get(b"content-type", b"")
                if message["status"] == 200 and ctype.startswith(b"application/json"):
                    state["kind"], state["start"] = "json", message  # sent with the body
                    return
                state["kind"] = "sse" if ctype.startswith(b"text/event-stream") else None
            elif message["type"] == "http.response.body" and state["kind"] == "json":
                state["body"].append(message.get("body", b""))
                if message.get("more_body", False):
                    return
                body = b"".join(state["body"])
                try:
                    updated = _with_stats(json.loads(body), self.stats_by_id, streamed=False)
                except ValueError:
                    updated = None
                if updated is not None:
                    body = json.dumps(updated).encode()
                start = state["start"]
                headers = [
                    (k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"
                ]
                headers.append((b"content-length", str(len(body)).encode()))
                await send({**start, "headers": headers})
                await send({"type": "http.response.body", "body": body, "more_body": False})
                return
            elif message["type"] == "http.response.body" and state["kind"] == "sse":
                message = {
                    **message,
                    "body": _sse_with_stats(message.get("body", b""), self.stats_by_id),
                }
            await send(message)

        await self.app(scope, receive, send_with_stats)
