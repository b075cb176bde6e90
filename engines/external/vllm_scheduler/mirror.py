"""The policy's view of a vLLM scheduler's requests: an `engines.core.Engine` that mirrors them.

A registered policy decides through the engine core's API (engines/core: waiting and running
sequences, their computed tokens, a block manager), so the adapter keeps one Engine per vLLM
scheduler whose sequences are vLLM's requests (prompt tokens, `max_tokens`) and whose block manager
has vLLM's usable KV blocks and block size. What the policy decides there, vLLM then does with its
own KV manager (scheduler.py); three rules keep the mirror's books at least as full as vLLM's, so a
batch the mirror could allocate, vLLM can:

  - a step counts as computed when it is scheduled (vLLM's async scheduler advances
    `num_computed_tokens` then too), so the next step is chosen on the state vLLM schedules from;
  - a sequence finished here (its last token scheduled) or stopped by vLLM keeps its blocks until
    vLLM frees the request's (`release`), which vLLM does once the step's output is back;
  - a sequence preempted while a token of it is still in flight is `parked`: vLLM's async
    scheduler resumes it only after that token arrives, so it rejoins the head of the queue then.

The mirror admits a prompt's blocks whole (the engine core's rule) where vLLM allocates chunk by
chunk: its count of used blocks is the policy's (KV reserved), vLLM's may be lower.
"""
from __future__ import annotations

from collections.abc import Callable

from engines.compiled import mypyc_attr
from engines.core import BlockManager, Engine, Policy, Sequence, SequenceStatus


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # (engines/compiled.py)
class MirrorEngine(Engine):
    def __init__(self, policy: Policy, blocks: BlockManager, max_model_len: int, policy_name: str,
                 on_preempt: Callable[[Sequence], bool]) -> None:
        """`on_preempt(seq)` preempts the request in vLLM and says whether a token of it is in flight."""
        super().__init__(policy, blocks, max_model_len, policy_name)
        self.on_preempt = on_preempt
        self.held: dict[int, Sequence] = {}  # finished here, blocks kept until vLLM frees the request's
        self.parked: list[Sequence] = []  # preempted with a token in flight, in the order preempted

    def preempt(self, seq: Sequence) -> None:
        super().preempt(seq)
        if self.on_preempt(seq):
            self.waiting.remove(seq)
            self.parked.append(seq)

    def unpark(self, ready: Callable[[Sequence], bool]) -> None:
        """Put back at the head of the queue the parked sequences vLLM can resume now, as
        preemption put them there (the last preempted first)."""
        for seq in [s for s in self.parked if ready(s)]:
            self.parked.remove(seq)
            self.waiting.appendleft(seq)

    def _finish(self, seq: Sequence) -> None:
        table, seq.block_table = seq.block_table, []
        super()._finish(seq)  # frees no block: the table is held
        seq.block_table = table
        self.held[seq.seq_id] = seq

    def release(self, seq_id: int) -> None:
        """vLLM freed the finished request's blocks: free the mirror's."""
        self.blocks.free(self.held.pop(seq_id))

    def drop(self, seq: Sequence, blocks_freed: bool) -> None:
        """vLLM finished or aborted the request (a stop token, a client gone): forget the sequence,
        its blocks held until vLLM frees them unless `blocks_freed`."""
        if seq in self.parked:
            self.parked.remove(seq)
            self.seqs.pop(seq.seq_id, None)
            seq.status = SequenceStatus.ABORTED
        elif seq.status is SequenceStatus.RUNNING:
            self.stop(seq.seq_id)
            if blocks_freed:
                self.release(seq.seq_id)
        else:
            self.abort(seq.seq_id)  # waiting: it holds no block
