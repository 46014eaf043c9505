"""The drafter for what a user passes as ``draft=``: a name, a path, a model, a callable, a
``Drafter`` or a list of them (free first)."""

from __future__ import annotations

import llama_cpp

from pyspec.errors import ArgumentTypeError, InvalidInputError, PyspecRuntimeError
from pyspec.llama.drafting.base import Drafter
from pyspec.llama.drafting.callable import CallableDrafter
from pyspec.llama.drafting.combined import CombinedDrafter
from pyspec.llama.drafting.draft_model import DraftModel
from pyspec.llama.drafting.lookup import PromptLookup
from pyspec.llama.options import names_a_file


def make_drafter(draft, target: llama_cpp.Llama, draft_p_min: float) -> Drafter:
    """A Drafter from what the user passed: None or "lookup", a GGUF path, a Llama, a
    llama-cpp-python LlamaDraftModel (or any callable ids -> ids), a Drafter, or a list of
    these in order, a free one then a costly one (``["lookup", "draft.gguf"]``: combined.py)."""
    if isinstance(draft, (list, tuple)):
        if len(draft) == 1:
            return make_drafter(draft[0], target, draft_p_min)
        if len(draft) != 2:
            raise InvalidInputError(
                f"draft takes a list of two drafters (free first, e.g. ['lookup', "
                f"'draft.gguf']), got {len(draft)}"
            )
        free = make_drafter(draft[0], target, draft_p_min)
        try:
            return CombinedDrafter(free, make_drafter(draft[1], target, draft_p_min))
        except BaseException:
            free.close()
            raise
    if draft is None or (isinstance(draft, str) and draft == "lookup"):
        return PromptLookup(token_text=target_text(target))
    if isinstance(draft, PromptLookup) and (
        draft.token_text is None or getattr(draft.token_text, "from_target", False)
    ):
        # it reads the request's instruction with this target's vocabulary (the
        # reproduction rule's mention stops, lookup.py): also when reused with another
        draft.read_with(target_text(target))
    if isinstance(draft, Drafter):
        drafter = draft
    elif names_a_file(draft):
        drafter = DraftModel(
            draft,
            p_min=draft_p_min,
            n_ctx=target.n_ctx(),
            n_threads=target.context_params.n_threads,
            flash_attn=target.context_params.flash_attn_type
            == llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
            # as the target's weights were (SpeculativeLlama's huge_pages; on by default)
            huge_pages=getattr(getattr(target, "huge_pages", None), "asked", True),
        )
    elif isinstance(draft, llama_cpp.Llama):
        drafter = DraftModel(draft, p_min=draft_p_min)
    elif callable(draft):
        return CallableDrafter(draft, target.n_vocab())
    else:
        raise ArgumentTypeError(
            f"draft must be None, 'lookup', a GGUF path, a llama_cpp.Llama, a "
            f"LlamaDraftModel or a pyspec Drafter; got {type(draft).__name__}"
        )
    if isinstance(drafter, DraftModel):
        drafter.check_compatible(target)
    return drafter


def target_text(target: llama_cpp.Llama):
    """token -> its text in ``target``'s vocabulary (control tokens, such as a chat
    template's turn markers: empty), as PromptLookup reads a request's instruction. Read
    with llama.cpp's token_to_piece into a buffer as long as the piece needs
    (llama-cpp-python's detokenize uses 32 bytes, and cuts a longer piece wrongly)."""
    import ctypes

    def text(token: int) -> str:
        # The model read at each call, which keeps it alive while this function is: its
        # vocabulary is freed with it, and a closed one must raise, not read freed memory.
        model = getattr(target, "_model", None)
        if model is None or getattr(model, "model", None) is None:
            raise PyspecRuntimeError("the target model is closed: its vocabulary is gone")
        size = 64
        while True:
            buffer = (ctypes.c_char * size)()
            n = llama_cpp.llama_token_to_piece(
                model.vocab, llama_cpp.llama_token(token), buffer, size, 0, False
            )
            if n >= 0:
                return bytes(buffer[:n]).decode("utf-8", errors="replace")
            size = -n  # the length the piece needs

    text.from_target = True  # (make_drafter binds it anew for another target)
    return text
