"""What one iteration computes: per sequence, how many new tokens over how much cached context."""
from __future__ import annotations

from dataclasses import dataclass

from engines.compiled import mypyc_attr
from engines.core.sequence import Sequence


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # (engines/compiled.py)
@dataclass(frozen=True, slots=True, init=False)
class Batch:
    seqs: tuple[Sequence, ...]
    new_tokens: tuple[int, ...]  # tokens computed this iteration (a decode: 1)
    context_lens: tuple[int, ...]  # tokens already in the KV cache before this iteration
    is_prefill: tuple[bool, ...]

    def __init__(self, seqs: tuple[Sequence, ...], new_tokens: tuple[int, ...], context_lens: tuple[int, ...],
                 is_prefill: tuple[bool, ...]) -> None:
        # The dataclass's own __init__, written out: compiled, it sets the fields directly (one
        # Batch a schedule() call); the generated one stays interpreted under mypyc. object.__setattr__
        # as the frozen dataclass's does (compiled: a plain field store); assignment still raises.
        object.__setattr__(self, "seqs", seqs)
        object.__setattr__(self, "new_tokens", new_tokens)
        object.__setattr__(self, "context_lens", context_lens)
        object.__setattr__(self, "is_prefill", is_prefill)

    @staticmethod
    def build(items: list[tuple[Sequence, int]]) -> Batch:
        """From (sequence, new tokens) pairs, taking context and phase from each sequence's state."""
        seqs = tuple([s for s, _ in items])
        return Batch(
            seqs=seqs,
            new_tokens=tuple([n for _, n in items]),
            context_lens=tuple([s.num_computed for s in seqs]),
            is_prefill=tuple([s.num_computed < s.prefill_target for s in seqs]),  # Sequence.is_prefill
        )

    @staticmethod
    def mixed(decodes: list[Sequence], prefills: list[Sequence], chunks: list[int],
              decode_contexts: list[int] | None = None) -> Batch:
        """`build` of decodes (one token each, past their prefill) followed by prefill chunks, made
        without a pair per item (the Sarathi-style schedulers build one every iteration).
        `decode_contexts`: the decodes' num_computed, where the caller has them (Engine.decode_pass)."""
        d = len(decodes)
        if not prefills and decode_contexts is not None:  # decodes only (most calls): no concatenation
            return Batch(tuple(decodes), (1,) * d, tuple(decode_contexts), (False,) * d)
        seqs = tuple(decodes + prefills)
        if decode_contexts is None:
            contexts = tuple([s.num_computed for s in seqs])
        else:
            contexts = tuple(decode_contexts + [s.num_computed for s in prefills])
        return Batch(
            seqs=seqs,
            new_tokens=(1,) * d + tuple(chunks),
            context_lens=contexts,
            is_prefill=(False,) * d + tuple([s.num_computed < s.prefill_target for s in prefills]),
        )

    @staticmethod
    def decodes(seqs: tuple[Sequence, ...]) -> Batch:
        """One decode token for each sequence (all past their prefill)."""
        n = len(seqs)
        return Batch(seqs, (1,) * n, tuple([s.num_computed for s in seqs]), (False,) * n)

    def __len__(self) -> int:
        return len(self.seqs)

    # Loops, not sum()/any(): compiled, a loop over the tuple is C; the builtins are generic calls
    # (the simulator asks is_decode_only of every batch).
    @property
    def num_tokens(self) -> int:
        total = 0
        for n in self.new_tokens:
            total += n
        return total

    @property
    def num_prefill_tokens(self) -> int:
        total = 0
        for n, p in zip(self.new_tokens, self.is_prefill):
            if p:
                total += n
        return total

    @property
    def num_decodes(self) -> int:
        count = 0
        for p in self.is_prefill:
            if not p:
                count += 1
        return count

    @property
    def has_prefill(self) -> bool:
        for p in self.is_prefill:
            if p:
                return True
        return False

    @property
    def is_decode_only(self) -> bool:
        return not self.has_prefill
