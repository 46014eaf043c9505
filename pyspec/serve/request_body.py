"""Checks a request body before any route sees it: a 400 where llama_cpp.server would
answer 500 or cut a stream.

- A body that is not JSON: llama_cpp.server's route error handler reads the body as JSON
  again to describe an error, that second read raises inside the handler, and the client
  gets a bare "Internal Server Error".
- A streamed request whose grammar does not parse: llama_cpp.server sends the stream's 200
  before the model sees the grammar, so the error could only cut the stream short. The
  grammar is parsed here first, with the loaded model's vocabulary (requests for another
  model than the loaded one are left to the route).
- A streamed request whose prompt cannot fit the context, for the same reason: the stream
  ended after its 200 with nothing in it, and the client's next request on that connection
  failed (session 48's walk with the ``openai`` client). Where the prompt's text alone
  takes the whole context (its tokens counted without the chat template, a lower bound),
  the answer is a 400 ``context_length_exceeded``, as an unstreamed request gets; a prompt
  that only the template's tokens push over still fails in the stream.
- A request for more than one choice (``n``, or a completion's ``best_of``): llama_cpp.server
  takes the field and answers one choice, which a client that asked for several reads as
  a short answer list; pyspec serve says so instead.
- A chat request with no messages (the chat template failed: a 500, or a stream with
  nothing in it) or a negative ``max_tokens`` (llama_cpp.server's chat request model takes
  it and decodes to the context's end; its completion request model refuses it).
"""

from __future__ import annotations

import json


def _error_body(message: str, code=None) -> bytes:
    return json.dumps(
        {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": code,
            }
        }
    ).encode()


def _problem(path: str, request) -> dict:
    """The error body's fields for a request the route would answer badly ({} for none)."""
    problem = _choices_problem(path, request) or _chat_problem(path, request)
    if problem:
        return {"message": problem}
    if not isinstance(request, dict) or not request.get("stream"):
        return {}  # (the route answers the rest before anything is sent)
    llama = _loaded_model(request)  # (once, for both checks of a stream)
    if llama is None:
        return {}
    problem = _stream_grammar_problem(request, llama)
    if problem:
        return {"message": problem}
    return _stream_context_problem(
        request,
        lambda text: len(llama.tokenize(text.encode(), add_bos=False, special=False)),
        llama.n_ctx(),
    )


def _loaded_model(request: dict):
    """The loaded Llama, when the request is for it (None: none loaded, or the request names
    another model of the config, which the route loads)."""
    import llama_cpp.server.app as server_app

    proxy = server_app._llama_proxy
    llama = getattr(proxy, "_current_model", None)
    asked = request.get("model")
    if llama is None or (asked and asked != proxy._current_model_alias and asked in list(proxy)):
        return None
    return llama


def _choices_problem(path: str, request) -> str:
    """Why a request for several choices cannot be answered ('' when it asks for one): ``n``
    on a completion or chat, ``best_of`` on a completion (the fields of llama_cpp.server's
    request models)."""
    if not isinstance(request, dict):
        return ""
    chat = path.endswith("/chat/completions")
    if not chat and not path.endswith("/completions"):
        return ""
    for name in ("n",) if chat else ("n", "best_of"):
        value = request.get(name)
        if value not in (None, 1, "1"):  # (the request model reads "1" as 1)
            return (
                f"invalid request: {name}: pyspec serve answers one choice per request "
                f"(got {value!r}); send the request again for another answer"
            )
    return ""


def _chat_problem(path: str, request) -> str:
    """Why a chat request cannot be answered ('' when it can, as far as seen here)."""
    if not path.endswith("/chat/completions") or not isinstance(request, dict):
        return ""
    if request.get("messages") == []:
        return "invalid request: messages: give at least one message"
    tokens = request.get("max_tokens")
    if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens < 0:
        return "invalid request: max_tokens: Input should be greater than or equal to 0"
    return ""


def _prompt_texts(request: dict) -> list:
    """The prompt's texts as the client sent them: a completion's prompt, or each chat
    message's text (the parts of a message given as a list of parts)."""
    prompt = request.get("prompt")
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list):
        return [p for p in prompt if isinstance(p, str)]
    texts = []
    for message in request.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [p.get("text") for p in content if isinstance(p, dict)]
    return [t for t in texts if isinstance(t, str)]


def _stream_context_problem(request: dict, count_tokens, n_ctx: int) -> dict:
    """The error body's fields when a streamed request's prompt texts alone take the whole
    context ({} otherwise). ``count_tokens(text)``: the model's token count of a text."""
    texts = _prompt_texts(request)
    if sum(len(t.encode()) for t in texts) < n_ctx:  # (a token holds a byte at least)
        return {}
    # Each text's tokens, less 2 for what may merge with the template's text at its ends.
    least = sum(max(count_tokens(t) - 2, 0) for t in texts)
    if least < n_ctx:
        return {}
    return {
        "message": f"This model's maximum context length is {n_ctx} tokens; the prompt's "
        f"text alone takes at least {least}. Please reduce the length of the prompt.",
        "code": "context_length_exceeded",
    }


def _stream_grammar_problem(request: dict, llama) -> str:
    """Why a streamed request's grammar cannot be used with the loaded ``llama`` ('' when
    it can, or when it has none)."""
    if not isinstance(request.get("grammar"), str):
        return ""
    import llama_cpp

    from pyspec.errors import InvalidRequestError
    from pyspec.llama.model import check_grammar

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
            problem = {"message": f"invalid request: the body is not JSON ({exc})"}
        else:
            problem = _problem(scope["path"], request)
        if problem:
            payload = _error_body(**problem)
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
