"""Every exception pyspec raises on purpose, in one hierarchy under ``PyspecError``.

    PyspecError                      catch this to catch everything pyspec raises
    ├── InvalidInputError            a value pyspec refuses: the caller's mistake (a ValueError)
    │   ├── LogitsError              logits hold NaN or +inf, or a row has no finite value
    │   ├── DraftProbsError          draft probabilities that are not probabilities
    │   ├── CapacityError            more vocabulary or threads than a verifier holds
    │   ├── ArgumentTypeError        an argument of the wrong type (also a TypeError)
    │   ├── InvalidRequestError      a request's own values (pyspec serve answers 400)
    │   ├── VocabularyMismatchError  a draft model whose tokenizer is not the target's
    │   └── UsageError               the command line's arguments
    └── PyspecRuntimeError           what this machine or installation cannot do now
        ├── LlamaNotInstalledError   llama-cpp-python is not installed yet
        ├── UnsafeLlamaBuildError    a llama-cpp-python build that would crash on this CPU
        ├── GraphSamplerUnavailable  the in-graph sampler cannot run here
        ├── CudaUnavailableError     no CUDA back end or no device
        ├── ClosedError              a SpeculativeLlama used after close()
        ├── LlamaBuildError          install-llama could not plan, build or install
        └── AmxFixError              the AMX fix does not apply to these sources

The C library's failures carry its ``pyspec_status`` code as ``status`` (-1 where none).
The subclasses keep the built-in bases their callers catch (``ValueError``, ``TypeError``,
``RuntimeError``), so ``except ValueError`` still sees a refused value.
"""

from __future__ import annotations

from pyspec._native.abi import Status


class PyspecError(Exception):
    """The root of pyspec's exceptions. ``status`` is the C ``pyspec_status`` code."""

    status = -1  # not a pyspec_status: an error raised without one

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status


class InvalidInputError(PyspecError, ValueError):
    """A value pyspec refuses (a shape, a dtype, a token id, a parameter): the message names
    the argument and what it must be. Nothing was changed by the failed call."""


class LogitsError(InvalidInputError):
    """Logits hold NaN or +inf, or a row has no finite value."""

    status = Status.LOGITS


class DraftProbsError(InvalidInputError):
    """Draft probabilities are not probabilities, or give a drafted token probability 0."""

    status = Status.DRAFT_PROBS


class CapacityError(InvalidInputError):
    """The call needs more vocabulary or threads than the verifier holds scratch for."""

    status = Status.CAPACITY


class ArgumentTypeError(InvalidInputError, TypeError):
    """An argument of the wrong type (a list where a callable belongs, ...)."""


class InvalidRequestError(InvalidInputError):
    """A request's own values cannot be served (a grammar that does not parse, ...): the
    caller's mistake, which pyspec serve answers with a 400."""


class VocabularyMismatchError(InvalidInputError):
    """The draft model's vocabulary is not the target's (pyspec.llama.compat)."""


class UsageError(InvalidInputError):
    """The command line's arguments do not make a run (pyspec generate, demo)."""


class PyspecRuntimeError(PyspecError, RuntimeError):
    """What this machine or installation cannot do now; the message says how to fix it."""


class LlamaNotInstalledError(PyspecRuntimeError):
    """llama-cpp-python is not installed (``python3 -m pyspec install-llama`` installs it)."""


class UnsafeLlamaBuildError(PyspecRuntimeError):
    """The installed llama-cpp-python would crash on this CPU (pyspec.llama.runtime.guard)."""


class GraphSamplerUnavailable(PyspecRuntimeError):
    """The in-graph sampler cannot run with this installation (the message says why)."""


class CudaUnavailableError(PyspecRuntimeError):
    """Device arrays were passed, but pyspec has no CUDA back end or this machine no device."""

    status = Status.CUDA


class ClosedError(PyspecRuntimeError):
    """A SpeculativeLlama (or its Speculation) was used after close()."""


class LlamaBuildError(PyspecRuntimeError):
    """The llama-cpp-python build could not be planned, built or installed."""


class AmxFixError(PyspecRuntimeError):
    """pyspec's AMX fix does not apply to the llama.cpp sources at hand."""


_BY_STATUS = {cls.status: cls for cls in (LogitsError, DraftProbsError, CapacityError)}


def raise_for_status(status: int, message: str) -> None:
    """Raises the exception matching a non-zero C status."""
    if status == Status.OK:
        return
    cls = _BY_STATUS.get(status, InvalidInputError)
    raise cls(message, status)
