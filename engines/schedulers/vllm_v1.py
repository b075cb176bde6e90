"""vLLM V1's scheduler as it ships (0.19 and 0.32: v1/core/sched/scheduler.py Scheduler.schedule;
engines/perf/vllm_releases.py cites every default), knobs named as its flags.

Each step, under one token budget (`--max-num-batched-tokens`):
  1. RUNNING requests, in priority order, whatever their phase: a decode takes 1 token, an ongoing
     prefill the rest of its prompt, capped by `--long-prefill-token-threshold` (when set; 0.32
     leaves the cap off when only one request is running or waiting) and by what is left of the
     budget. The walk stops when the budget is spent: a request behind it waits for the next step.
     A request whose KV slots do not fit preempts the lowest-priority running request (recompute:
     its KV freed, back to the head of the queue) until they do, or preempts itself and ends the walk.
  2. WAITING requests, FCFS, only if step 1 preempted nobody: each admitted while fewer than
     `--max-num-seqs` run and its KV fits, its prompt chunked to the cap and the budget left.
     The first that cannot be admitted ends the step (no request passes it).

Where it is Sarathi-Serve's stall-free batching (engines/schedulers/sarathi.py): one budget counting
decode tokens, decodes never left out for a prefill, ongoing prefills before new ones, FCFS
chunked admission. Where it differs: running requests are walked in one priority order (Sarathi
takes every decode, then the prefills); the long-prefill cap (so several prompts progress in one
step); no admission in a step that preempted; max_num_batched_tokens >= max_num_seqs, as vLLM
refuses less (config/scheduler.py SchedulerConfig.__post_init__), so decodes always fit the budget.

"Priority order" is V1's running list: the order of admission, a resumed (preempted) request
appended at its end; the policy keeps that order itself (the engine keeps arrival order). Admission
is V1's KV gate (0.32 v1/core/kv_cache_manager.py KVCacheManager.allocate_slots with
full_sequence_must_fit, config/scheduler.py scheduler_reserve_full_isl = True): the blocks of the
request's whole sequence so far must fit in the free ones, with no watermark (watermark = 0.0),
and it then takes only its first chunk's blocks; later chunks take theirs as they are scheduled.
With a prefix cache, the hits count as computed (evictable ones taken count against the free
blocks), and a chunk's full blocks are findable as soon as it is scheduled (allocate_slots ->
cache_blocks), so a request admitted later in the same step hits blocks another is filling in it
(each layer writes the step's KV before attending). Step by step, each step's {request: tokens}
and preemptions are vLLM 0.32's own Scheduler's on randomized streams, with and without a prefix
cache (tests/test_vllm_v1_agreement.py, scripts/vllm_scheduler_steps.py), given the pool vLLM's N
blocks leave usable: N - 1 (its BlockPool keeps one as the null block). Where the harness's engine
is still not vLLM's (engines/core): the order a full pool takes blocks in (vLLM: freed blocks oldest
first, cached or not; the engine: uncached ones first), so under KV pressure with a prefix cache the
steps may part (not compared); a sequence in flight under pipeline
parallelism is never a victim (V1 may pick one); vLLM's synchronous scheduler is the one compared
(async scheduling's overlap of CPU and GPU is priced by the stack, vllm_releases.py). Release 0.19
gets the same rules unverified: only 0.32's scheduler (the installed CPU build) is compared.
"""
from __future__ import annotations

from engines.core import BasePolicy, Batch, Engine, PrefixCachingBlockManager, Sequence
from engines.schedulers.registry import register_policy, require_positive
from engines.schedulers.sweep import Axis, Sweep

RELEASES = ("0.19", "0.32")  # engines/perf/vllm_releases.py RELEASES' keys (the core may not import perf; tests/test_engine_release.py)


# Planned only when asked (plan.grid.vllm_v1.max_num_batched_tokens=[...]); its budget is the flag it exports.
@register_policy("vllm_v1", vllm="chunked_prefill", plan=Sweep(Axis("max_num_batched_tokens", (), "b", "budget {}"),
                                                              Axis("max_num_seqs", (256,), "s", "batch {}"), title="vLLM V1"))
class VllmV1Policy(BasePolicy):
    """vLLM V1's scheduler as it ships (0.19, 0.32): running requests first in priority order, then
    waiting ones FCFS, one token budget, chunked prefills, a long-prefill cap, preemption by recompute."""


    def __init__(self, max_num_batched_tokens: int = 2048, max_num_seqs: int = 256, long_prefill_token_threshold: int = 0,
                 release: str = "0.32", *, max_model_len: int) -> None:
        """Defaults: `vllm serve` on a GPU under 70 GiB or an A100 (vllm_releases.py [ARGS]; H100/H200:
        8192 and 1024; B200 on 0.32: 16384 and 1024), no long-prefill cap, the 0.32 rules."""
        require_positive(max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs)
        if max_num_batched_tokens < max_num_seqs:
            raise ValueError(f"max_num_batched_tokens ({max_num_batched_tokens}) must be >= max_num_seqs ({max_num_seqs}), "
                             "as vLLM requires")
        if not 0 <= long_prefill_token_threshold <= max_model_len:
            raise ValueError(f"long_prefill_token_threshold must be in [0, max_model_len {max_model_len}], "
                             f"got {long_prefill_token_threshold}")
        if release not in RELEASES:
            raise ValueError(f"release must be one of {', '.join(RELEASES)}, got {release!r}")
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.long_prefill_token_threshold = long_prefill_token_threshold
        self.release = release
        self.max_batch_tokens = max_num_batched_tokens
        # Flags beyond the mode's (engines/external/vllm.py policy_flags adds them).
        self.vllm_flags = (("--long-prefill-token-threshold", str(long_prefill_token_threshold))
                           if long_prefill_token_threshold else ())
        self._preempted = False  # whether the last step preempted (no admission in it)
        self._admitted: dict[int, int] = {}  # seq_id -> when it was (last) admitted: V1's running order
        self._clock = 0

    def _cap(self, engine: Engine) -> int:
        """The long-prefill cap of this step (0: none)."""
        alone = len(engine.running) + len(engine.waiting) <= 1
        return 0 if alone and self.release != "0.19" else self.long_prefill_token_threshold

    def schedule(self, engine: Engine) -> Batch | None:
        cap = self._cap(engine)
        budget = self.max_num_batched_tokens
        items: list[tuple[Sequence, int]] = []
        preemptions = engine.num_preemptions
        self._walk_running(engine, cap, budget, items)
        budget -= sum(n for _, n in items)
        self._preempted = engine.num_preemptions != preemptions
        if not self._preempted:
            self._admit(engine, cap, budget, items)
        return Batch.build(items) if items else None

    def _walk_running(self, engine: Engine, cap: int, budget: int, items: list[tuple[Sequence, int]]) -> None:
        blocks = engine.blocks
        caching = isinstance(blocks, PrefixCachingBlockManager)
        if len(self._admitted) > 2 * len(engine.running) + 1024:  # forget finished requests now and then
            self._admitted = {s.seq_id: self._admitted.get(s.seq_id, -1) for s in engine.running}
        order = self._admitted.get  # a sequence admitted elsewhere (a decode instance's) first, by arrival
        pending = sorted((s for s in engine.running if not s.in_flight),  # in flight (PP): nothing new
                         key=lambda s: (order(s.seq_id, -1), s.seq_id))
        i = 0
        while i < len(pending) and budget > 0:
            seq = pending[i]
            n = seq.remaining_prefill if seq.is_prefill else 1
            n = min(cap if 0 < cap < n else n, budget)
            while blocks.blocks_to_grow(seq, seq.num_computed + n) > blocks.num_free:
                victim = pending.pop()  # the lowest priority not yet scheduled, perhaps seq itself
                engine.preempt(victim)
                if victim is seq:
                    return
            blocks.grow(seq, seq.num_computed + n)
            if caching and seq.is_prefill:  # as at admission (below)
                blocks.register(seq, seq.num_computed + n)
            items.append((seq, n))
            budget -= n
            i += 1

    def _admit(self, engine: Engine, cap: int, budget: int, items: list[tuple[Sequence, int]]) -> None:
        blocks = engine.blocks
        caching = isinstance(blocks, PrefixCachingBlockManager)
        while engine.waiting and budget > 0 and len(engine.running) < self.max_num_seqs:
            seq = engine.waiting[0]
            # V1's gate (0.32 KVCacheManager.allocate_slots, full_sequence_must_fit: SchedulerConfig
            # scheduler_reserve_full_isl = True): the blocks of its whole sequence so far, less its prefix
            # hits (counting the evictable ones it takes), fit in the free ones, with no watermark
            # (SchedulerConfig.watermark = 0.0); it then takes only this chunk's. (With a prefix cache
            # admission_blocks looks the hits up first and sets num_computed to them.)
            if blocks.admission_blocks(seq) > blocks.num_free:
                return
            n = seq.remaining_prefill
            n = min(cap if 0 < cap < n else n, budget)
            engine.admit_next(seq.num_computed + n)
            if caching:  # V1 caches a chunk's full blocks when it allocates them (allocate_slots -> cache_blocks)
                blocks.register(seq, seq.num_computed + n)
            self._admitted[seq.seq_id] = self._clock
            self._clock += 1
            items.append((seq, n))
            budget -= n

    def decode_batch_repeats(self, engine: Engine) -> bool:
        """FCFS admission stopped at the head repeats; a step that preempted admitted nobody, and the
        next one may (vLLM's rule), so it does not."""
        return not self._preempted
