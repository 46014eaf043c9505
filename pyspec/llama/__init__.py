"""pyspec's llama-cpp-python integration: speculative decoding on real GGUF models."""
from .adaptive import DraftLengthController
from .compat import VocabularyMismatchError, check_compatible
from .drafters import CallableDrafter, Draft, Drafter, DraftModel
from .lookup import PromptLookup
from .speculative import (ClosedError, Speculation, SpeculativeLlama, enable_speculation,
                          sampling_params_for, unsupported_reason)
from .stats import SpeculationStats

__all__ = [
    "CallableDrafter", "ClosedError", "Draft", "DraftLengthController", "DraftModel", "Drafter",
    "PromptLookup", "Speculation", "SpeculationStats", "SpeculativeLlama",
    "VocabularyMismatchError", "check_compatible", "enable_speculation",
    "sampling_params_for", "unsupported_reason",
]
