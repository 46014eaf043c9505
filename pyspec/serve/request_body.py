"""Request bodies that are not JSON get a 400, not a 500.

llama_cpp.server's route error handler reads the body as JSON again to describe an error;
when the body is not JSON at all, that second read raises inside the handler and the client
gets a bare "Internal Server Error". This middleware answers such requests itself, with the
OpenAI-style error object, before they reach a route.
"""
from __future__ import annotations

import json


def _error_body(message: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "invalid_request_error",
                                 "param": None, "code": None}}).encode()


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
            json.loads(body)
        except ValueError as exc:
            payload = _error_body(f"invalid request: the body is not JSON ({exc})")
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(payload)).encode())]})
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
