"""pyspec's llama-cpp-python integration: speculative decoding on real GGUF models.

The public names load on first use (PEP 562), not when the package is imported: the
installer (``pyspec install-llama``) and the command line import modules of this package
(the AMX fix, the build record, the options) on a machine where llama-cpp-python is not
installed yet, and the modules behind these names import llama_cpp.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# name -> the module that defines it
_PUBLIC = {
    "CallableDrafter": "pyspec.llama.drafting.callable",
    "ClosedError": "pyspec.llama.model",
    "Draft": "pyspec.llama.drafting.base",
    "DraftLengthController": "pyspec.llama.drafting.adaptive",
    "DraftModel": "pyspec.llama.drafting.draft_model",
    "Drafter": "pyspec.llama.drafting.base",
    "PromptLookup": "pyspec.llama.drafting.lookup",
    "Speculation": "pyspec.llama.loop",
    "SpeculationStats": "pyspec.llama.stats",
    "SpeculativeLlama": "pyspec.llama.model",
    "VocabularyMismatchError": "pyspec.llama.compat",
    "check_compatible": "pyspec.llama.compat",
    "enable_speculation": "pyspec.llama.model",
    "sampling_params_for": "pyspec.llama.sampling_args",
    "unsupported_reason": "pyspec.llama.sampling_args",
}
__all__ = [  # the keys of _PUBLIC, spelled out for linters and `import *`
    "CallableDrafter",
    "ClosedError",
    "Draft",
    "DraftLengthController",
    "DraftModel",
    "Drafter",
    "PromptLookup",
    "Speculation",
    "SpeculationStats",
    "SpeculativeLlama",
    "VocabularyMismatchError",
    "check_compatible",
    "enable_speculation",
    "sampling_params_for",
    "unsupported_reason",
]


def __getattr__(name: str):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'pyspec.llama' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC))


if TYPE_CHECKING:  # what type checkers and readers see; the same names as _PUBLIC
    from pyspec.llama.compat import VocabularyMismatchError, check_compatible
    from pyspec.llama.drafting.adaptive import DraftLengthController
    from pyspec.llama.drafting.base import Draft, Drafter
    from pyspec.llama.drafting.callable import CallableDrafter
    from pyspec.llama.drafting.draft_model import DraftModel
    from pyspec.llama.drafting.lookup import PromptLookup
    from pyspec.llama.loop import Speculation
    from pyspec.llama.model import ClosedError, SpeculativeLlama, enable_speculation
    from pyspec.llama.sampling_args import sampling_params_for, unsupported_reason
    from pyspec.llama.stats import SpeculationStats
