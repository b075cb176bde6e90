"""`PolicyScheduler`: vLLM's async scheduler, each step's batch chosen by a registered policy.

vLLM loads it by name (`--scheduler-cls engines.external.vllm_scheduler.scheduler.PolicyScheduler`,
the policy in the environment: see `__init__.py`). Every step:

 1. the mirror (mirror.py) catches up with vLLM: requests finished, aborted or freed;
 2. the policy schedules on the mirror (`Engine.schedule`: checked against its invariants); a
    preemption it makes is done at once in vLLM (`Scheduler._preempt_request`: blocks freed,
    request back at the head of vLLM's waiting queue);
 3. vLLM's own `schedule()` runs on exactly the chosen requests: its running list and waiting
    queue narrowed to them, in an order where each takes all it has left but the last, and its
    token budget set to the step's tokens. So `allocate_slots`, the SchedulerOutput, the request
    states and the async placeholders are vLLM's code; the adapter then checks that vLLM scheduled
    exactly the policy's {request: tokens} and preempted nothing of its own, and stops the engine
    in one line if not (a wrong number is worse than none);
 4. the step counts as computed in the mirror (as vLLM's `num_computed_tokens` does).

Refused in one line, when vLLM builds the scheduler: a vLLM release not in SUPPORTED_VLLM, and what
the mirror does not model (prefix caching, speculative decoding, KV connectors, pipeline or data
parallelism, priority scheduling, a long-prefill threshold, chunked prefill off, a token budget or
batch size below the policy's). At run time: a batch vLLM's schedule() cannot take as chosen (two
partial prompt chunks, or a running request's partial chunk before a new request's prompt; none of
the built-in policies makes one).
"""
from __future__ import annotations

import itertools
import os
import time

import vllm

from engines.core import BlockManager, Sequence, blocks_for
from engines.external.vllm_scheduler import SCHEDULER_CLS, SUPPORTED_VLLM, TRACE_ENV, scheduler_from_env, supports
from engines.external.vllm_scheduler.mirror import MirrorEngine
from engines.external.vllm_scheduler.trace import TraceWriter
from engines.schedulers import make_policy

if not supports(vllm.__version__):
    raise ImportError(f"{SCHEDULER_CLS} supports vLLM {', '.join(SUPPORTED_VLLM)} only, not {vllm.__version__}: "
                      "its scheduler interface is not public and changes between releases")

from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402 (after the version check)
from vllm.v1.core.sched.interface import PauseState  # noqa: E402
from vllm.v1.core.sched.request_queue import SchedulingPolicy, create_request_queue  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402


class PolicyScheduler(AsyncScheduler):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.harness_scheduler = cfg = scheduler_from_env(os.environ)
        policy = make_policy(cfg, self.max_model_len)
        refusal = self._unsupported(policy)
        if refusal:
            raise ValueError(f"{SCHEDULER_CLS} cannot run policy {cfg.policy!r} here: {refusal}")
        num_blocks = self.kv_cache_manager.block_pool.get_num_free_blocks()
        policy.check_kv(num_blocks, blocks_for(self.max_model_len, self.block_size))
        reserve = self.max_model_len if policy.reserves_kv else None
        self.mirror = MirrorEngine(policy, BlockManager(num_blocks, self.block_size, reserve_tokens=reserve),
                                   self.max_model_len, cfg.policy, self._preempt_for_policy)
        self._seq_ids = itertools.count()
        self._seq_of: dict[str, Sequence] = {}  # vLLM request id -> the mirror's sequence
        self._req_of: dict[int, str] = {}
        self._preempted: list[str] = []
        self._start = time.monotonic()
        self._step = 0
        self._pending: dict[int, tuple[object, dict]] = {}  # id(SchedulerOutput) -> (it, its trace record)
        path = os.environ.get(TRACE_ENV)
        self.trace = TraceWriter(path, {
            "vllm": vllm.__version__, "scheduler_cls": SCHEDULER_CLS, "policy": cfg.policy,
            "knobs": dict(cfg.knobs), "block_size": self.block_size, "kv_blocks": num_blocks,
            "max_model_len": self.max_model_len}) if path else None

    def _unsupported(self, policy) -> str | None:
        """Why the mirror cannot stand for this vLLM configuration (None: it can)."""
        sc, cache = self.scheduler_config, self.cache_config
        most_tokens = max(policy.max_batch_tokens or policy.max_num_seqs * self.max_model_len, policy.max_num_seqs)
        checks = (
            (cache.enable_prefix_caching, "prefix caching is on (pass --no-enable-prefix-caching)"),
            (self.vllm_config.speculative_config is not None, "speculative decoding is on"),
            (self.connector is not None or self.ec_connector is not None, "a KV or encoder-cache connector is set"),
            (self.parallel_config.pipeline_parallel_size > 1, "pipeline parallelism"),
            (self.parallel_config.data_parallel_size > 1, "data parallelism (one scheduler per engine, DP balancing)"),
            (self.policy != SchedulingPolicy.FCFS, f"vLLM's scheduling policy is {self.policy.value}, not fcfs"),
            (sc.long_prefill_token_threshold > 0, "a long-prefill token threshold is set (the policy sizes chunks)"),
            (not sc.enable_chunked_prefill, "chunked prefill is off (pass --enable-chunked-prefill; the policy "
                                            "decides whether prompts are chunked)"),
            (policy.max_num_seqs > self.max_num_running_reqs,
             f"its max_num_seqs {policy.max_num_seqs} > vLLM's --max-num-seqs {self.max_num_running_reqs}"),
            (most_tokens > min(sc.max_num_batched_tokens, self.max_num_scheduled_tokens),
             f"a step of it holds up to {most_tokens} tokens > vLLM's --max-num-batched-tokens "
             f"{sc.max_num_batched_tokens}"),
        )
        return next((why for bad, why in checks if bad), None)

    # -- requests ----------------------------------------------------------------------------
    def add_request(self, request: Request) -> None:
        if request.mm_features or request.pooling_params is not None or request.resumable:
            raise ValueError(f"{SCHEDULER_CLS}: request {request.request_id} is multimodal, pooling or a "
                             "streaming session; the policies schedule text generation only")
        super().add_request(request)
        seq = Sequence(next(self._seq_ids), request.num_prompt_tokens, request.max_tokens)
        self.mirror.add(seq)
        self._seq_of[request.request_id] = seq
        self._req_of[seq.seq_id] = request.request_id

    def _catch_up(self) -> None:
        """Bring the mirror to vLLM's state: blocks vLLM freed, requests it finished or dropped,
        parked requests it can resume."""
        for seq_id in [i for i in self.mirror.held if self._req_of[i] not in self.requests]:
            self.mirror.release(seq_id)
            del self._seq_of[self._req_of.pop(seq_id)]
        for rid, seq in list(self._seq_of.items()):
            if seq.seq_id in self.mirror.held:
                continue
            request = self.requests.get(rid)
            if request is None or request.is_finished():
                self.mirror.drop(seq, blocks_freed=request is None)
                if seq.seq_id not in self.mirror.held:
                    del self._seq_of[rid], self._req_of[seq.seq_id]
        self.mirror.unpark(lambda s: self.requests[self._req_of[s.seq_id]].num_stale_output_tokens == 0)

    def _preempt_for_policy(self, seq: Sequence) -> bool:
        request = self.requests[self._req_of[seq.seq_id]]
        self.running.remove(request)
        self._preempt_request(request, time.monotonic())
        self._preempted.append(request.request_id)
        return request.num_stale_output_tokens > 0 and not request.drop_stale_output

    # -- the step ----------------------------------------------------------------------------
    def schedule(self, throttle_prefills: bool = False):
        if self._pause_state != PauseState.UNPAUSED:
            if self._pause_state == PauseState.PAUSED_ALL:
                return super().schedule()  # schedules nothing
            raise RuntimeError(f"{SCHEDULER_CLS}: vLLM's pause of new requests is not supported")
        t0 = time.monotonic() if self.trace is not None else 0.0
        self._catch_up()
        self._preempted = []
        batch = self.mirror.schedule()
        chosen = [] if batch is None else [(self.requests[self._req_of[s.seq_id]], n)
                                           for s, n in zip(batch.seqs, batch.new_tokens)]
        out = self._schedule_exactly(chosen)
        if batch is not None:
            self.mirror.complete(batch)
            if self.trace is not None:
                self._pending[id(out)] = (out, self._record(t0, batch, out))
        return out

    def _schedule_exactly(self, chosen: list[tuple[Request, int]]):
        """vLLM's schedule() on exactly `chosen`, checked."""
        running = [(r, n) for r, n in chosen if r.status == RequestStatus.RUNNING]
        waiting = [(r, n) for r, n in chosen if r.status != RequestStatus.RUNNING]
        partial = [r for r, n in chosen if n < _left(r)]
        if len(partial) > 1 or (partial and partial[0].status == RequestStatus.RUNNING and waiting):
            raise RuntimeError(f"{SCHEDULER_CLS}: policy {self.harness_scheduler.policy!r} chose partial chunks of "
                               f"{[r.request_id for r in partial]} with new prompts; vLLM's schedule() gives every "
                               "request but the last all it has left, so it cannot run this batch")
        # Each request takes all it has left, the one partial chunk last, within a budget of the step's tokens.
        running.sort(key=lambda item: item[0] in partial)
        waiting.sort(key=lambda item: item[0] in partial)
        saved_running, saved_waiting, saved_budget = self.running, self.waiting, self.max_num_scheduled_tokens
        self.running = [r for r, _ in running]
        self.waiting = create_request_queue(self.policy)
        for r, _ in waiting:
            self.waiting.add_request(r)
        self.max_num_scheduled_tokens = sum(n for _, n in chosen)
        try:
            out = super().schedule()
        finally:
            before = {r.request_id for r in saved_running}
            admitted = [r for r in self.running if r.request_id not in before]
            saved_waiting.remove_requests(admitted)
            self.running, self.waiting, self.max_num_scheduled_tokens = saved_running + admitted, saved_waiting, saved_budget
        expected = {r.request_id: n for r, n in chosen}
        if out.num_scheduled_tokens != expected or out.preempted_req_ids != set(self._preempted):
            raise RuntimeError(f"{SCHEDULER_CLS}: vLLM scheduled {out.num_scheduled_tokens} (preempted "
                               f"{sorted(out.preempted_req_ids)}) where policy {self.harness_scheduler.policy!r} "
                               f"chose {expected} (preempted {self._preempted}); the run is not a result")
        return out

    # -- the trace ---------------------------------------------------------------------------
    def _record(self, t0: float, batch, out) -> dict:
        """The step as vLLM scheduled it (`out`: request ids and tokens), each request's phase and
        context as the policy saw them (`batch`)."""
        record = {"step": self._step, "t_s": t0 - self._start, "prefill_ids": [], "prefill_tokens": [],
                  "prefill_context": [], "decode_ids": [], "decode_context": [], "preempted": self._preempted,
                  "kv_blocks_used": self.mirror.blocks.num_blocks - self.kv_cache_manager.block_pool.get_num_free_blocks(),
                  "kv_blocks_policy": self.mirror.blocks.num_used, "running": len(self.running),
                  "waiting": len(self.waiting)}
        self._step += 1
        seen = {self._req_of[s.seq_id]: (c, p) for s, c, p in zip(batch.seqs, batch.context_lens, batch.is_prefill)}
        for rid, n in out.num_scheduled_tokens.items():
            context, prefill = seen[rid]
            phase = "prefill" if prefill else "decode"
            record[f"{phase}_ids"].append(rid)
            record[f"{phase}_context"].append(context)
            if prefill:
                record["prefill_tokens"].append(n)
        return record

    def update_from_output(self, scheduler_output, model_runner_output):
        pending = self._pending.pop(id(scheduler_output), None)
        if pending is not None and pending[0] is scheduler_output:
            record = pending[1]
            record["wall_s"] = time.monotonic() - self._start - record["t_s"]
            self.trace.write(record)
        return super().update_from_output(scheduler_output, model_runner_output)

    def shutdown(self) -> None:
        super().shutdown()
        if self.trace is not None:
            self.trace.close()


def _left(request: Request) -> int:
    """Tokens vLLM's schedule() would give `request` with budget to spare (its running and waiting
    loops: prompt and outputs not yet computed, in-flight placeholders counted)."""
    return request.num_tokens_with_spec + request.num_output_placeholders - request.num_computed_tokens
