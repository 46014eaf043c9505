"""Speculation statistics, per call and cumulative."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from pyspec.llama.rounds import Round


@dataclass
class SpeculationStats:
    """Counts and times of one generate call (or a running total)."""

    verify_steps: int = 0  # target forward passes that verified drafts (k >= 1)
    plain_steps: int = 0  # target forward passes without drafts (k = 0)
    drafted: int = 0  # draft tokens proposed
    accepted: int = 0  # draft tokens accepted
    rejected_steps: int = 0  # verify steps that ended in a rejection
    emitted: int = 0  # tokens produced by the loop (prompt's first token included)
    draft_seconds: float = 0.0  # time in the drafter
    target_seconds: float = 0.0  # time in the target's forward passes (prompt excluded)
    # Time in pyspec's fused verifier. Verification and sampling are one pass there (the
    # transforms, the acceptance test and the corrective or bonus draw read each row once),
    # so there is no separate sampling time to report.
    verify_seconds: float = 0.0
    prompt_seconds: float = 0.0  # time evaluating the prompt
    # The rounds after the prompt's, whole (drafting, the target's passes, the verifier and the
    # loop's bookkeeping; not the time the caller takes over each emitted token).
    round_seconds: float = 0.0
    round_tokens: int = 0  # the tokens those rounds emitted (a stop string may cut the last)
    # The drafter's name ("lookup", "draft-model", "lookup+draft-model", ...; "none" with
    # draft_max 0).
    drafter: str = ""
    fallback_reason: str = ""  # why a request ran without speculation, if it did
    # Where the verify rows were sampled: "graph" (inside llama.cpp's graph, no logits row
    # copied out) or "host" (with why the graph could not, under sampling="auto").
    sampling: str = ""
    # What the cost model believed at the end of the request (per-token cost, batch curve,
    # acceptance by draft kind) and why its last round drafted what it drafted.
    cost_model: str = ""
    draft_lengths: dict = field(default_factory=dict)  # k -> verify steps that drafted k
    # Grammar and logits processors (requests that use them): drafts the grammar forbade
    # (never verified), verify rows masked, and the time that took (part of verify_seconds).
    grammar_cut: int = 0
    grammar_rows: int = 0
    grammar_seconds: float = 0.0
    processor_seconds: float = 0.0
    # Speculative rounds: the tokens the cost model expected them to emit, and what they did.
    predicted_emitted: float = 0.0
    speculative_emitted: int = 0
    costly_steps: int = 0  # verify steps whose drafts came from the costly drafter (a draft model)
    # The memory of earlier requests (lookup): drafts asked of it and given during this
    # call, and the tokens it held at the end (0 with the memory off).
    memory_lookups: int = 0
    memory_hits: int = 0
    memory_tokens: int = 0
    # Rounds whose free draft waited because the target was unsure of its last tokens (the
    # unsure rule; on by default beside a free drafter).
    unsure_holds: int = 0
    # Rounds whose draft was verified as a sure copy (the sure-copy rule, on beside it).
    sure_copy_rounds: int = 0
    # Rounds whose remembered tokens were believed (the remembered-copy rule, on beside it):
    # text the memory of earlier requests held twice or more (an answer once at least).
    remembered_rounds: int = 0
    # Rounds whose reproduced tokens were believed (the reproduction rule, on beside it):
    # prompt text the answer has copied from its first token or code fence (a file given to
    # edit).
    reproduced_rounds: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def per_token_acceptance(self) -> float:
        """Acceptance per draft position (censored-geometric estimate): what the
        (1 - a^(k+1)) / (1 - a) model of Leviathan et al. calls a."""
        n = self.accepted + self.rejected_steps
        return self.accepted / n if n else 0.0

    @property
    def realised_over_predicted(self) -> float:
        """Tokens the speculative rounds emitted over what the cost model expected (1.0 is a
        calibrated model; 0 when no round drafted)."""
        return self.speculative_emitted / self.predicted_emitted if self.predicted_emitted else 0.0

    @property
    def memory_hit_rate(self) -> float:
        return self.memory_hits / self.memory_lookups if self.memory_lookups else 0.0

    @property
    def tokens_per_verify_step(self) -> float:
        """Mean tokens per target forward pass after the prompt: what those rounds decided
        (emitted - 1 for one request until session 49, which over a running total counted
        every request's first token but one)."""
        return self.round_tokens / self.steps if self.steps else 0.0

    @property
    def steps(self) -> int:
        """Target forward passes after the prompt's: the rounds, with drafts or without."""
        return self.verify_steps + self.plain_steps

    @property
    def decode_rate(self) -> float:
        """Tokens per second after the first token: what the rounds after the prompt's
        emitted over their own time (0 when none ran)."""
        return self.round_tokens / self.round_seconds if self.round_seconds > 0 else 0.0

    @property
    def effective_k(self) -> float:
        """Mean draft length over the forward passes that carried drafts."""
        return self.drafted / self.verify_steps if self.verify_steps else 0.0

    def add_round(self, r: Round) -> None:
        """Counts one round of the loop (or of a replay)."""
        self.draft_seconds += r.draft_seconds
        self.target_seconds += r.target_seconds
        self.verify_seconds += r.verify_seconds
        self.round_seconds += r.round_seconds
        self.round_tokens += r.emitted
        self.unsure_holds += r.held_back
        self.sure_copy_rounds += r.sure_copy
        self.remembered_rounds += r.remembered > 0
        self.reproduced_rounds += r.reproduced > 0
        if r.batch > 1:
            self.verify_steps += 1
            self.draft_lengths[r.verified] = self.draft_lengths.get(r.verified, 0) + 1
            self.drafted += r.verified
            self.accepted += r.accepted
            self.rejected_steps += r.accepted < r.verified
            self.predicted_emitted += r.predicted
            self.costly_steps += r.costly
            self.speculative_emitted += r.emitted
        else:
            self.plain_steps += 1

    def add(self, other: "SpeculationStats") -> None:
        for f in fields(self):
            if f.name == "draft_lengths":
                for k, n in other.draft_lengths.items():
                    self.draft_lengths[k] = self.draft_lengths.get(k, 0) + n
            elif f.name in (
                "fallback_reason",
                "cost_model",
                "sampling",
                "memory_tokens",
                "drafter",
            ):
                if getattr(other, f.name):
                    setattr(self, f.name, getattr(other, f.name))
            else:
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["draft_lengths"] = dict(self.draft_lengths)
        d.update(
            acceptance_rate=self.acceptance_rate,
            tokens_per_verify_step=self.tokens_per_verify_step,
            effective_k=self.effective_k,
            decode_rate=self.decode_rate,
            realised_over_predicted=self.realised_over_predicted,
            memory_hit_rate=self.memory_hit_rate,
        )
        return d

    def summary(self) -> str:
        if self.fallback_reason:
            return f"speculation off for this request: {self.fallback_reason}"
        return (
            (f"{self.drafter}: " if self.drafter else "")
            + f"drafted {self.drafted}, accepted {self.accepted} "
            f"({100 * self.acceptance_rate:.1f}%), {self.tokens_per_verify_step:.2f} tokens per "
            f"target step, effective k {self.effective_k:.2f}, {self.verify_steps} verify + "
            f"{self.plain_steps} plain steps; time: draft {self.draft_seconds:.3f}s, target "
            f"{self.target_seconds:.3f}s, verify+sample {self.verify_seconds * 1e3:.1f}ms, "
            f"prompt {self.prompt_seconds:.3f}s"
            + (f"; {self.decode_rate:.2f} tok/s after the first" if self.round_seconds else "")
            + (f"; sampling {self.sampling}" if self.sampling else "")
            + (
                f"; realised/predicted tokens {self.realised_over_predicted:.2f}"
                if self.predicted_emitted
                else ""
            )
            + (
                f"; memory {self.memory_tokens} tokens, {self.memory_hits}/{self.memory_lookups} "
                f"lookups hit"
                if self.memory_lookups
                else ""
            )
            + (
                f"; {self.unsure_holds} drafts held back (the target was unsure)"
                if self.unsure_holds
                else ""
            )
            + (
                f"; {self.sure_copy_rounds} drafts verified as sure copies"
                if self.sure_copy_rounds
                else ""
            )
            + (
                f"; {self.remembered_rounds} drafts verified as text earlier requests held"
                if self.remembered_rounds
                else ""
            )
            + (
                f"; {self.reproduced_rounds} drafts verified as prompt text the answer reproduces"
                if self.reproduced_rounds
                else ""
            )
            + self._constraint_summary()
        )

    def _constraint_summary(self) -> str:
        parts = []
        if self.grammar_rows:
            parts.append(
                f"grammar {self.grammar_seconds * 1e3:.1f}ms over {self.grammar_rows} rows "
                f"({self.grammar_seconds / self.grammar_rows * 1e6:.0f}us each), "
                f"{self.grammar_cut} drafts it forbade"
            )
        if self.processor_seconds:
            parts.append(f"logits processors {self.processor_seconds * 1e3:.1f}ms")
        return "; " + ", ".join(parts) if parts else ""
