"""Drafters combined: free drafts first, a costly drafter where they have nothing.

``SpeculativeLlama(target, draft=["lookup", "draft.gguf"])``: each round asks the free
drafter (prompt lookup) first; where its draft is worth verifying (the cost model says so,
from what its kinds of drafts passed), that is the round. Where it has nothing, or nothing
worth it, the costly drafter (a draft model) drafts, if its own controller, under its loss
budget, says it pays. The two controllers share one batch-cost curve (the target's passes
are the same whoever drafted), so one cost model decides both; each keeps the acceptance
and costs of its own drafter. The draft model catches up lazily on what lookup rounds
emitted, and the loss budget charges that catch-up to the round that needs it.
"""

from __future__ import annotations

from typing import Optional

from pyspec.errors import ArgumentTypeError, InvalidInputError
from pyspec.llama.drafting.base import Drafter


class CombinedDrafter(Drafter):
    """A free drafter and a costly one, in that order (``members``)."""

    name = "combined"
    free = False

    def __init__(self, free: Drafter, costly: Drafter):
        if not free.free or costly.free:
            raise InvalidInputError(
                f"a combined drafter is a free drafter then a costly one (lookup, then a "
                f"draft model); got {free.name} then {costly.name}"
            )
        self.free_member, self.costly_member = free, costly
        self.members = (free, costly)
        self.name = f"{free.name}+{costly.name}"

    def point_mass(self, params) -> bool:
        return all(m.point_mass(params) for m in self.members)

    def start_request(self) -> None:
        for m in self.members:
            m.start_request()

    def end_request(self, context, n_prompt: Optional[int] = None) -> None:
        for m in self.members:
            m.end_request(context, n_prompt)

    def set_reproducible(self, on: bool) -> None:
        for m in self.members:
            m.set_reproducible(on)

    def catch_up_tokens(self, context) -> int:
        return self.costly_member.catch_up_tokens(context)

    def draft(self, context, max_tokens, params, position):
        raise ArgumentTypeError(
            "a combined drafter is driven by the loop (Speculation._draft), member by member"
        )

    def close(self) -> None:
        for m in self.members:
            m.close()
