"""pyspec's llama-cpp-python integration: speculative decoding on real GGUF models."""

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

__all__ = [
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
