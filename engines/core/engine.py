"""The engine step loop: add, schedule, complete, abort. No clock, no I/O: deterministic.

A policy (engines/schedulers) decides what each iteration computes; the engine owns the queues,
the KV blocks and the bookkeeping that follows a finished iteration. The caller (a simulator or a
server) runs the batch and calls `complete` when it is done.
"""
from __future__ import annotations

from bisect import insort
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from engines.compiled import mypyc_attr
from engines.core.batch import Batch
from engines.core.block_manager import BlockManager
from engines.core.checks import launch, policy_broken
from engines.core.decode_pass import decode_pass
from engines.core.policy import Policy
from engines.core.sequence import Sequence, SequenceStatus


Grow = Callable[[Sequence, int], None]  # BlockManager.grow: a sequence's KV to hold so many tokens


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # (engines/compiled.py)
@dataclass(frozen=True, slots=True, init=False)
class StepOutput:
    produced: tuple[Sequence, ...]  # sequences that made one output token this iteration
    finished: tuple[Sequence, ...]

    def __init__(self, produced: tuple[Sequence, ...], finished: tuple[Sequence, ...]) -> None:
        # written out, compiled (one StepOutput an iteration): as Batch.__init__ (batch.py)
        object.__setattr__(self, "produced", produced)
        object.__setattr__(self, "finished", finished)


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # (engines/compiled.py)
class Engine:
    def __init__(self, policy: Policy, blocks: BlockManager, max_model_len: int, policy_name: str | None = None) -> None:
        self.policy = policy
        self.policy_name = policy_name or type(policy).__qualname__  # what a broken batch's error names
        self.blocks = blocks
        self.max_model_len = max_model_len
        self.waiting: deque[Sequence] = deque()
        # Running sequences sorted by arrival (seq_id): FCFS priority, the newest is preempted first.
        self.running: list[Sequence] = []
        self.seqs: dict[int, Sequence] = {}
        self.num_preemptions = 0  # total so far; lets a caller see whether a schedule() preempted
        # Sequences released (preempted, finished, aborted: their KV freed) so far, and what this
        # schedule()'s decode pass vouches for: (its decodes, `releases` after it); its batch check
        # need not check those again while no sequence is released (decode_pass.py). A plain
        # tuple: made every stepped iteration.
        self.releases = 0
        self.vouch: tuple[tuple[Sequence, ...], int] | None = None

    # -- requests -------------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        if seq.max_len > self.max_model_len:
            raise ValueError(
                f"request {seq.seq_id}: prompt {seq.prompt_len} + output {seq.output_len} tokens "
                f"exceed max_model_len {self.max_model_len}"
            )
        if seq.seq_id in self.seqs:
            raise ValueError(f"request {seq.seq_id} added twice")
        self.seqs[seq.seq_id] = seq
        self.waiting.append(seq)

    def abort(self, seq_id: int) -> None:
        seq = self.seqs.pop(seq_id, None)
        if seq is None or seq.is_finished:
            return
        if seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        else:
            self.running.remove(seq)
        self.blocks.free(seq)
        self.releases += 1
        seq.status = SequenceStatus.ABORTED

    def stop(self, seq_id: int) -> None:
        """Finish a running request early (a stop token was sampled); frees its KV blocks."""
        seq = self.seqs.get(seq_id)
        if seq is not None and seq.status is SequenceStatus.RUNNING:
            self._finish(seq)

    @property
    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    # -- operations the policies use --------------------------------------------------------
    def admit_next(self, num_tokens: int | None = None) -> Sequence:
        """Move the head of the waiting queue to running, allocating its KV blocks: its prompt's,
        or (`num_tokens`, a paged cache) those of its first `num_tokens` tokens (with a prefix cache,
        its cached leading blocks and fresh ones after them)."""
        seq = self.waiting.popleft()
        if num_tokens is None:
            self.blocks.admit(seq)
        else:
            self.blocks.admit(seq, num_tokens)
        seq.status = SequenceStatus.RUNNING
        running = self.running
        if not running or running[-1].seq_id < seq.seq_id:  # the newest (most admissions): no search
            running.append(seq)
        else:
            insort(running, seq, key=_arrival_order)
        return seq

    def preempt(self, seq: Sequence) -> None:
        """Preempt by recompute: free the KV cache, put the sequence back at the head of the queue."""
        self.running.remove(seq)
        self.blocks.free(seq)
        seq.reset_for_recompute()
        self.num_preemptions += 1
        self.releases += 1
        self.waiting.appendleft(seq)

    def decode_pass(self) -> tuple[list[Sequence], list[Sequence], list[int]]:
        """One KV slot for every running decode, preempting where none is free: (decodes, running
        prefills waiting for chunks, the decodes' contexts), in priority order (decode_pass.py). The
        engine vouches for the decodes: a batch that starts with them is checked only past them."""
        decodes, prefills, contexts = decode_pass(self)
        self.vouch = (tuple(decodes), self.releases)
        return decodes, prefills, contexts

    # -- the step loop ----------------------------------------------------------------------
    def schedule(self) -> Batch | None:
        """The policy's batch, checked against its invariants (engines/core/checks.py) and put in
        flight; PolicyBroken names the policy when it raised or its batch breaks them."""
        self.vouch = None  # a decode pass of this schedule() vouches anew
        try:
            batch = self.policy.schedule(self)
        except Exception as e:  # a plugin's bug: say whose, keep the cause chained
            raise policy_broken(self.policy_name, f"schedule raised {type(e).__name__}: {e}") from e
        if batch is None or not batch.seqs:
            return None
        problem = launch(self, batch)
        if problem is not None:
            raise policy_broken(self.policy_name, problem)
        return batch

    def complete(self, batch: Batch) -> StepOutput:
        produced: list[Sequence] = []
        finished: list[Sequence] = []
        running = SequenceStatus.RUNNING  # a local: this loop runs for every sequence of every iteration
        for seq, n in zip(batch.seqs, batch.new_tokens):
            seq.in_flight = False
            if seq.status is not running:  # aborted while in flight
                continue
            computed = seq.num_computed + n
            seq.num_computed = computed
            if computed < seq.prefill_target:
                continue  # a prefill chunk that is not the last one makes no token
            generated = seq.num_generated + 1
            seq.num_generated = generated
            produced.append(seq)
            if generated == seq.output_len:
                self._finish(seq)
                finished.append(seq)
        return StepOutput(tuple(produced), tuple(finished))

    # -- runs of identical decode-only iterations -------------------------------------------
    def decode_batch_repeats(self) -> bool:
        """Would the policy return the decode-only batch it just returned again, with the same
        sequences, while nothing arrives or finishes? (The policy's hook; BasePolicy says yes.)"""
        return self.policy.decode_batch_repeats(self)

    @property
    def free_blocks(self) -> int:
        return self.blocks.num_free

    @property
    def kv_paged(self) -> bool:
        """Paged KV (blocks grow with decodes), not reserved for the maximum length up front."""
        return self.blocks.reserve_tokens is None

    def decode_headroom(self, seqs) -> list[int]:
        """Per sequence, decode tokens it can add before needing a new KV block (BlockManager)."""
        return [self.blocks.decode_headroom(s) for s in seqs]

    def decode_run_limit(self, batch: Batch) -> int:
        """How many times `batch` (decode-only) can repeat with the same sequences.

        The run ends with the iteration that finishes the first sequence, or before the
        iteration whose block allocation the free list could not cover (then the policy must
        decide about preemption). Policies admit FCFS and stop at the first request that does
        not fit, and during a decode-only run free blocks only shrink and the running set is
        fixed, so a request that could not be admitted at the start cannot be admitted inside
        the run; the caller still stops the run at an arrival when the waiting queue is empty.
        """
        if not self.decode_batch_repeats():
            return 1
        seqs = batch.seqs
        return self._slots_for(seqs, _fewest_left(seqs))

    def chunk_run_limit(self, batch: Batch) -> int:
        """How many times `batch` (running decodes, then one prompt's chunk filling the policy's
        budget) repeats: the same decodes one token each, the prompt's next chunk of the same size,
        nothing admitted (Policy.chunk_batch_repeats). The run ends with the iteration that finishes
        the first decode, before the chunk that would end the prompt (it makes a token: a new
        decode), and before the iteration whose decode slots the free list could not cover. 1 where
        the policy does not say so, or where a subclass keeps books of its own in complete() (the
        prefix cache registers computed blocks there): those step."""
        if type(self).complete is not Engine.complete or not self.policy.chunk_batch_repeats(self, batch):
            return 1
        seqs = batch.seqs
        prompt = seqs[-1]
        # rows whose chunk leaves some of the prompt: (left - 1) // chunk of them
        limit = (prompt.prefill_target - prompt.num_computed - 1) // batch.new_tokens[-1]
        decodes = seqs[:-1]
        if decodes and limit > 1:
            limit = self._slots_for(decodes, min(limit, _fewest_left(decodes)))
        return max(limit, 1)

    def _slots_for(self, seqs, limit: int) -> int:
        """The most rows, up to `limit`, in which each of `seqs` (decodes whose first row's slot the
        policy allocated) decodes one token a row with the free list covering its new blocks."""
        blocks = self.blocks
        if not self.kv_paged:
            return limit
        free = blocks.num_free
        # A sequence needs at most ceil(limit / block size) blocks for `limit` more tokens (its
        # headroom is >= 1: the policy allocated the first iteration's slot), so where the free
        # list covers that for all of them, no headroom need be counted (most runs: a few dozen rows).
        if len(seqs) * -(-limit // blocks.block_size) <= free:
            return limit
        # The first iteration's slots were already allocated by the policy: headroom counts
        # from the sequences' state before it.
        headroom = self.decode_headroom(seqs)
        needed = blocks.decode_blocks_needed
        if needed(headroom, limit) <= free:
            return limit
        lo, hi = 1, limit  # needed(lo) <= free < needed(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if needed(headroom, mid) <= free:
                lo = mid
            else:
                hi = mid
        return lo

    def launch_decodes(self, seqs: tuple[Sequence, ...]) -> Batch:
        """Put running sequences in flight for one decode iteration, allocating its KV slots, as
        schedule() would for a decode-only batch (the simulator's replay hands back with it)."""
        for seq in seqs:
            self.blocks.grow(seq, seq.num_computed + 1)
            seq.in_flight = True
        return Batch.decodes(seqs)

    def complete_decode_run(self, batch: Batch, k: int) -> tuple[Sequence, ...]:
        """Complete `k` repetitions of a decode-only batch at once; returns the finished sequences.

        Exactly what k alternating schedule()/complete() calls would do, given k <= decode_run_limit.
        With k = 0 it only takes the batch out of flight.
        """
        return self._decode_run_done(batch, k, self.blocks.grow)

    def complete_chunk_run(self, batch: Batch, k: int) -> tuple[Sequence, ...]:
        """Complete `k` repetitions of a chunk-run batch at once (1 <= k <= chunk_run_limit): its
        decodes as complete_decode_run, its prompt k chunks further (no token: the run stops before
        the prompt's last chunk). Exactly what k alternating schedule()/complete() calls would do."""
        prompt = batch.seqs[-1]
        prompt.in_flight = False
        prompt.num_computed += k * batch.new_tokens[-1]
        return self._decodes_done(batch.seqs[:-1], k, self.blocks.grow)

    def _decode_run_done(self, batch: Batch, k: int, grow: Grow | None) -> tuple[Sequence, ...]:
        """complete_decode_run, each sequence's KV grown by `grow` first (None: already grown)."""
        return self._decodes_done(batch.seqs, k, grow)

    def _decodes_done(self, seqs: tuple[Sequence, ...], k: int, grow: Grow | None) -> tuple[Sequence, ...]:
        """`k` decode tokens for each of `seqs`, its KV grown by `grow` first (None: already grown).
        (`seqs` typed: compiled, each field is then read and written in place, not looked up by name.)"""
        finished: list[Sequence] = []
        bs = self.blocks.block_size
        for seq in seqs:
            seq.in_flight = False
            computed = seq.num_computed + k
            # grow only where the table does not cover the run (where it does, grow takes nothing)
            if grow is not None and computed > len(seq.block_table) * bs:
                grow(seq, computed)
            seq.num_computed = computed
            generated = seq.num_generated + k
            seq.num_generated = generated
            if generated == seq.output_len:
                self._finish(seq)
                finished.append(seq)
        return tuple(finished)

    def _finish(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.FINISHED
        self.running.remove(seq)
        self.blocks.free(seq)
        self.releases += 1
        del self.seqs[seq.seq_id]


def _arrival_order(seq: Sequence) -> int:
    return seq.seq_id


def _fewest_left(seqs: tuple[Sequence, ...]) -> int:
    """The fewest output tokens any of `seqs` (at least one) has left to make (remaining_output,
    inlined): a compiled loop, where min() of a list was a generic call on a new list."""
    fewest = seqs[0].output_len - seqs[0].num_generated
    for s in seqs:
        left = s.output_len - s.num_generated
        if left < fewest:
            fewest = left
    return fewest
