"""The options a ``SpeculativeLlama`` takes, checked in one place: the sampling modes, the
draft lengths, the memory of earlier requests, the thread counts. The command line and the
server's settings read their choices and limits from here; nothing here loads llama.cpp, so
they can check before a model loads.
"""

from __future__ import annotations

import difflib
import inspect
import os
from dataclasses import dataclass
from numbers import Integral, Real

from pyspec._native.abi import MAX_DRAFT
from pyspec.errors import ArgumentTypeError, InvalidInputError
from pyspec.llama.drafting.adaptive import DEFAULT_DRAFT_MAX
from pyspec.llama.drafting.request_memory import DEFAULT_MAX_TOKENS
from pyspec.verifier import check_threads

# Where verify rows are sampled: "graph" inside llama.cpp's graph (libpyspec_llama; only
# tokens reach the host), "host" by libpyspec over llama.cpp's logits buffer, "auto" in the
# graph when the model's logits are computed on a GPU and the request allows it, on the host
# otherwise (said once per reason in the log).
SAMPLING_MODES = ("auto", "graph", "host")


def check_sampling_mode(sampling: str) -> None:
    if sampling not in SAMPLING_MODES:
        raise InvalidInputError(
            f"sampling must be one of {', '.join(map(repr, SAMPLING_MODES))}, got {sampling!r}"
        )


def check_draft_range(draft_min: int, draft_max: int) -> None:
    """0 <= draft_min <= draft_max <= MAX_DRAFT (pyspec.h's limit, 64)."""
    if not 0 <= draft_min <= draft_max <= MAX_DRAFT:
        raise InvalidInputError(
            f"need 0 <= draft_min <= draft_max <= {MAX_DRAFT}, got draft_min={draft_min}, "
            f"draft_max={draft_max}"
        )


def memory_size(memory) -> int:
    """Tokens the memory of earlier requests may hold: True is the default cap, False or 0
    no memory, an int that many tokens."""
    if memory is True:
        return DEFAULT_MAX_TOKENS
    if memory is False or memory is None:
        return 0
    if isinstance(memory, bool) or not isinstance(memory, int) or memory < 0:
        raise InvalidInputError(
            f"memory must be True, False or a number of tokens >= 0, got {memory!r}"
        )
    return memory


def check_llama_threads(llama_kwargs: dict) -> None:
    """llama.cpp starts as many threads as asked, whatever the machine: n_threads=1024 leaves
    1024 OS threads alive (and +300 MiB). The verifier's own check refuses counts above the
    machine's cores; -1 or None is llama-cpp-python's "choose for me"."""
    for name in ("n_threads", "n_threads_batch"):
        value = llama_kwargs.get(name)
        if value is not None and value != -1:
            check_threads(value, name)


@dataclass(frozen=True)
class SpeculationOptions:
    """How one model decodes speculatively: SpeculativeLlama's keywords (its docstring says
    what each does), checked when made, so a bad one is refused before a model loads."""

    draft_max: int = DEFAULT_DRAFT_MAX
    draft_min: int = 0
    draft_p_min: float = 0.0
    adaptive: bool = True
    sampling: str = "auto"
    reproducible: bool = False
    memory: object = True

    def __post_init__(self):
        for name in ("draft_max", "draft_min"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, Integral):
                raise ArgumentTypeError(f"{name} must be a whole number, got {value!r}")
        check_draft_p_min(self.draft_p_min, "draft_p_min")
        for name in ("adaptive", "reproducible"):
            if not isinstance(getattr(self, name), bool):
                raise ArgumentTypeError(
                    f"{name} must be True or False, got {getattr(self, name)!r}"
                )
        check_sampling_mode(self.sampling)
        check_draft_range(self.draft_min, self.draft_max)
        memory_size(self.memory)

    @property
    def memory_tokens(self) -> int:
        return memory_size(self.memory)


def check_draft_p_min(value, name: str = "p_min") -> None:
    """A draft model's cut-off probability (llama.cpp's --draft-p-min): a number in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ArgumentTypeError(f"{name} must be a number, got {value!r}")
    if not 0.0 <= value < 1.0:
        raise InvalidInputError(f"{name} must be in [0, 1), got {value!r}")


def names_a_file(draft) -> bool:
    """Whether a drafter given to SpeculativeLlama is a path (of a GGUF draft model)."""
    return isinstance(draft, (str, bytes)) or hasattr(draft, "__fspath__")


def check_keywords(given, who: str, *signatures) -> None:
    """Refuses a keyword that none of the functions' ``signatures`` (inspect.Signature) names.
    Why: llama_cpp.Llama swallows unknown keywords (its ``**kwargs``) and ignores them, so a
    misspelt ``draft_maxx=8`` or ``n_thread=2`` ran with the default, silently."""
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    known = sorted(
        {
            name
            for signature in signatures
            for name, parameter in signature.parameters.items()
            if parameter.kind in named and name != "self"
        }
    )
    for name in given:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidInputError(f"{who} got an unknown keyword {name!r}{hint}")


def check_draft_files(draft) -> None:
    """A drafter given as a path must name a file, checked before the target loads (a
    typo such as 'lookp' failed in llama-cpp-python after the target's load, as 'Model
    path does not exist')."""
    for one in draft if isinstance(draft, (list, tuple)) else [draft]:
        if isinstance(one, str) and one == "lookup":
            continue
        if names_a_file(one):
            path = os.fsdecode(os.fspath(one))
            if not os.path.isfile(path):
                why = "is a directory" if os.path.isdir(path) else "no such file"
                raise InvalidInputError(
                    f"draft {path!r}: {why}; a drafter is 'lookup' (prompt lookup), the path "
                    f"of a GGUF draft model, a llama_cpp.Llama, a pyspec Drafter, or a list "
                    f"of two of these"
                )
