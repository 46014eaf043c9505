"""pyspec serve's settings: llama_cpp.server's own, plus the drafter of each model.

The settings models extend llama-cpp-python's (``ModelSettings``, ``ServerSettings``,
``ConfigFileSettings``) so every option of ``python -m llama_cpp.server`` keeps its name,
type, environment variable and config-file key. Changed defaults, and why:
- ``logits_all`` is off: logprobs are answered from the verifier's own rows per request
  (llama-cpp-python's default, on, would copy every row of every request).
- ``flash_attn`` is on, as llama.cpp's own server and tools run on a CPU (their default,
  auto, turns it on there; llama-cpp-python leaves it off unless asked): plain decoding of
  Qwen2.5-Coder 1.5B ran 1-4% faster with it on the AMX Xeon (docs/generation.md).
- ``interrupt_requests`` is off: llama_cpp.server's default ends a streaming answer as soon
  as another request arrives; queued clients should each get a complete answer.
- ``n_threads`` is every CPU, as ``pyspec generate``'s ``-t``: llama_cpp.server's default,
  half of them, decoded on one thread of a 2-core machine, where every figure in the docs
  used two (session 48's walk through the server with the ``openai`` client).
"""

from __future__ import annotations

import os
from typing import List, Optional

from llama_cpp.server.settings import ModelSettings, ServerSettings
from pydantic import Field, field_validator

from pyspec._native.abi import MAX_DRAFT
from pyspec.errors import InvalidInputError
from pyspec.llama.drafting.adaptive import DEFAULT_DRAFT_MAX


class SpeculativeModelSettings(ModelSettings):
    draft: str = Field(
        default="lookup",
        description="The drafter: 'lookup' (n-gram lookup in the prompt and output, free), a "
        "path to a small GGUF model with the same tokenizer, 'lookup,PATH' (both: "
        "lookup first, the draft model where lookup has nothing), or 'none' (plain "
        "decoding through the same loop).",
    )
    draft_max: int = Field(
        default=DEFAULT_DRAFT_MAX,
        ge=0,
        le=MAX_DRAFT,
        description="Most draft tokens per round (beyond 16 only where drafts keep passing "
        "in full from the first round of several requests in a row).",
    )
    draft_min: int = Field(
        default=0, ge=0, le=MAX_DRAFT, description="Fewest draft tokens per round."
    )
    draft_p_min: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description=(
            "A draft model stops drafting when its top token's probability falls below this."
        ),
    )
    adaptive: bool = Field(
        default=True, description="Choose the draft length per round with the online cost model."
    )
    reproducible: bool = Field(
        default=False,
        description="Give every request the rows a fresh model would compute, whatever earlier "
        "requests left in the cache (cached cells are kept only as whole n_batch "
        "chunks): with a seed and adaptive off, a request then gives the same "
        "text whatever came before it. Off: a repeated request still repeats.",
    )
    memory: int = Field(
        default=65536,
        ge=0,
        description="Tokens of earlier requests (prompts and answers, oldest out) that prompt "
        "lookup also searches for drafts; 0 turns the memory off. Only with "
        "adaptive on and reproducible off.",
    )
    n_threads: int = Field(
        default=os.cpu_count() or 1,
        ge=1,
        description="Threads for llama.cpp's decoding (default: every CPU, as pyspec "
        "generate; llama_cpp.server's own default is half of them).",
    )
    calibrate: bool = Field(
        default=True,
        description="When the model loads (at start-up or on a switch), measure the batch costs "
        "at every draft length if the cost cache has none for this model and setup (about "
        "2 minutes for a 1.5B model on 2 cores, up to 5 on slower ones; once, kept in the "
        "cache).",
    )
    flash_attn: bool = Field(
        default=True,
        description="Flash attention (on by default, as in llama.cpp's own server; "
        "--flash_attn false turns it off).",
    )
    logits_all: bool = Field(
        default=False,
        description="Keep every token's logits (llama-cpp-python's way to answer logprobs); not "
        "needed here: pyspec keeps the rows of the requests that ask for logprobs.",
    )

    @field_validator("draft_model")
    @classmethod
    def _no_llama_cpp_draft_model(cls, value: Optional[str]) -> Optional[str]:
        if value is not None:
            raise InvalidInputError(
                "draft_model is llama-cpp-python's own prompt-lookup loop (it forces "
                "logits_all); with pyspec use draft='lookup' (--lookup) or a GGUF "
                "path (-md)"
            )
        return value

    @field_validator("draft_model_num_pred_tokens")
    @classmethod
    def _no_llama_cpp_draft_length(cls, value: int) -> int:
        default = ModelSettings.model_fields["draft_model_num_pred_tokens"].default
        if value != default:  # it would be taken and ignored
            raise InvalidInputError(
                "draft_model_num_pred_tokens belongs to llama-cpp-python's own draft_model, "
                "which pyspec serve does not use; pyspec's draft length is draft_max "
                "(--draft-max)"
            )
        return value


class SpeculativeServerSettings(ServerSettings):
    interrupt_requests: bool = Field(
        default=False,
        description="End a streaming answer when another request arrives (llama_cpp.server's "
        "default); off here: queued requests wait for their turn.",
    )


class SpeculativeSettings(SpeculativeServerSettings, SpeculativeModelSettings):
    pass


class SpeculativeConfigFileSettings(SpeculativeServerSettings):
    """The config file (JSON or YAML): server settings and a list of models, each with its
    own ``draft``, ``draft_max``, ..."""

    models: List[SpeculativeModelSettings] = Field(default=[], description="Model configs")
