"""The engine's check of a policy's batch, before anything executes it.

A policy is code the engine does not own (plugins live in other packages): a batch that breaks
what the policy itself declares, or what the engine's books rely on, would otherwise run and
give silently wrong numbers (a batch over its token budget is priced as if it were allowed; a
finished sequence scheduled again makes tokens nobody asked for). So every batch a policy returns
is checked against:

  - its sequences: running (not waiting, finished or aborted), not in flight (pipeline
    parallelism: a sequence is in at most one micro-batch), each once;
  - its tokens: a prefill chunk within the prompt left to compute, a decode exactly one token,
    never zero or fewer;
  - KV: each sequence's block table covers its context plus the tokens it computes now (the
    policy allocated them through the engine's block manager);
  - the policy's own declarations: `max_batch_tokens` (where it is not None) bounds the tokens of
    a batch holding a prefill (decodes are never held back, so a decode-only batch may pass it),
    `max_num_seqs` bounds the running sequences.

A violation raises PolicyBroken naming the policy and the sequence: a RunBroken, so a command
exits with status 3 and keeps nothing as a passing result. The check is one pass over the batch
(it also puts the batch in flight, which the engine did in a pass of its own): about 0.1 us a
sequence, measured at +3 % to +20 % CPU for Sarathi's 2,048-request Yi-34B probe (430k sequences
checked in 12.5k batches) on a loaded machine, within noise for vLLM's and Orca's; records stay
bit-identical (benchmarks/fingerprint_sim.py). The decodes the engine's own decode pass returned
(decode_pass.py) are not checked again: a batch that starts with them is checked past them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from common.errors import RunBroken
from engines.core.sequence import SequenceStatus

if TYPE_CHECKING:
    from engines.core.batch import Batch
    from engines.core.engine import Engine
    from engines.core.sequence import Sequence


class PolicyBroken(RunBroken):
    """A scheduling policy raised in `schedule` or returned a batch that breaks its invariants."""


def launch(engine: Engine, batch: Batch) -> str | None:
    """Check `batch` and put its sequences in flight; what is wrong with it (None: nothing). Hot:
    one loop over the batch, marking as it checks (a sequence met twice is then met in flight),
    the details looked up only once something is wrong. After a problem the engine is not used
    again (PolicyBroken ends the run, or the server's loop), so what was marked stays marked."""
    running = SequenceStatus.RUNNING
    bs = engine.blocks.block_size
    seqs, new_tokens = batch.seqs, batch.new_tokens
    if len(new_tokens) != len(seqs):
        return f"{len(seqs)} sequences but {len(new_tokens)} token counts"
    # Index loops, not zip(), slices or tuple.count: compiled (mypyc), these are C loops over the tuples.
    start = 0
    vouch = engine.vouch
    if vouch is not None:  # this schedule()'s decode pass checked its decodes (decode_pass.py)
        vouched, releases = vouch
        d = len(vouched)
        # the batch starts with exactly them (the same objects), one token each, and no sequence
        # was released since: put them in flight, check only the rest
        if d and releases == engine.releases and d <= len(seqs) and _starts_with(seqs, new_tokens, vouched):
            for seq in vouched:
                seq.in_flight = True
            start = d
    tokens = start  # the vouched decodes', one each
    for i in range(start, len(seqs)):
        seq = seqs[i]
        n = new_tokens[i]
        # KV first: the test every sequence needs (one not running holds no blocks, so it fails it
        # too); then one token is a decode or a 1-token chunk, more must be a chunk within the prompt.
        if (seq.in_flight or seq.num_computed + n > len(seq.block_table) * bs or seq.status is not running
                or (n != 1 and (n < 1 or seq.num_computed + n > seq.prefill_target))):
            return _sequence_problem(seq, n, bs, seqs)
        seq.in_flight = True
        tokens += n
    policy = engine.policy
    budget = policy.max_batch_tokens
    problem = None
    if budget is not None and tokens > budget and any(batch.is_prefill):
        problem = f"{tokens} tokens with a prefill, over its max_batch_tokens {budget}"
    cap = policy.max_num_seqs
    if len(engine.running) > cap:
        problem = f"{len(engine.running)} sequences running, over its max_num_seqs {cap}"
    return problem


def _starts_with(seqs: tuple[Sequence, ...], new_tokens: tuple[int, ...], vouched: tuple[Sequence, ...]) -> bool:
    """Does the batch start with the sequences `vouched`, in order, one token each?"""
    for i in range(len(vouched)):
        if seqs[i] is not vouched[i] or new_tokens[i] != 1:
            return False
    return True


def _sequence_problem(seq, n: int, block_size: int, seqs) -> str:
    if sum(s is seq for s in seqs) > 1:
        return f"{seq} is in the batch twice"
    if seq.status is not SequenceStatus.RUNNING:
        return f"{seq} is scheduled but {seq.status.value}"
    if seq.in_flight:
        return f"{seq} is scheduled while in flight in another batch"
    if n < 1:
        return f"{seq} is scheduled for {n} tokens"
    if seq.num_computed < seq.prefill_target:
        return f"{seq} is scheduled for a chunk of {n} tokens, {seq.remaining_prefill} of its prompt left"
    if n != 1:
        return f"{seq} is past its prefill and scheduled for {n} tokens, not 1"
    return (f"{seq} computes tokens {seq.num_computed}..{seq.num_computed + n - 1} but holds KV blocks for "
            f"{len(seq.block_table) * block_size}")


def policy_broken(name: str, problem: str) -> PolicyBroken:
    return PolicyBroken(f"scheduling policy {name} broke its contract: {problem}; the run is not a result")
