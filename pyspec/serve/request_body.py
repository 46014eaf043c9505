"""Checks a request body before any route sees it: a 400 where llama_cpp.server would
answer 500 or cut a stream.

- A body that is not JSON: llama_cpp.server's route error handler reads the body as JSON
  again to describe an error, that second read raises inside the handler, and the client
  gets a bare "Internal Server Error".
- A streamed request whose grammar does not parse: llama_cpp.server sends the stream's 200
  before the model sees the grammar, so the error could only cut the stream short. The
  grammar is parsed here first, with the loaded model's vocabulary (requests for another
  model than the loaded one are left to the route).
"""

from __future__ import annotations

import json


def _error_body(message: str) -> bytes:
    return json.dumps(
        {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
        }
    ).encode()


def _stream_grammar_problem(request) -> str:
    """Why a streamed request's grammar cannot be used ('' when it can, or when the request
    is for a model other than the loaded one)."""
    if (
        not isinstance(request, dict)
        or not request.get("stream")
        or not isinstance(request.get("grammar"), str)
    ):
        return ""
    import llama_cpp
    import llama_cpp.server.app as server_app

    from pyspec.errors import InvalidRequestError
    from pyspec.llama.model import check_grammar

    proxy = server_app._llama_proxy
    llama = getattr(proxy, "_current_model", None)
    asked = request.get("model")
    if llama is None or (asked and asked != proxy._current_model_alias and asked in list(proxy)):
        return ""
    try:
        check_grammar(llama, llama_cpp.LlamaGrammar.from_string(request["grammar"], verbose=False))
    except InvalidRequestError as exc:
        return f"invalid request: {exc}"
    return ""


class JsonBodyMiddleware:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or "/v1/" not in scope["path"]:
            await self.app(scope, receive, send)
            return
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client left while sending
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            request = json.loads(body)
        except ValueError as exc:
            problem = f"invalid request: the body is not JSON ({exc})"
        else:
            problem = _stream_grammar_problem(request)
        if problem:
            payload = _error_body(problem)
            await send(
                {
                    "type": "http.response.start",
                    "status": 400,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(payload)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": payload})
            return
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # later: disconnect notices, as the app expects

        await self.app(scope, replay, send)
