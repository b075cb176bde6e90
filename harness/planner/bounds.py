"""Upper bounds on a configuration's capacity from the performance model alone (no simulation):
what a plan uses to skip configurations that cannot win.

Each bound is a rate no probe of the configuration can pass above (up to the slack below), from
facts every simulated iteration obeys:

* decode: a sequence gains at most one token per iteration, so an iteration of b sequences
  yields at most b tokens and lasts at least a decode of b sequences at the shortest context any
  decode has (the smallest prompt + 1). b is at most max_num_seqs and what the KV cache holds of
  the smallest prompts (Orca reserves max_model_len per request). Every TBT sample lasts at least
  its iteration, so all but (1 - q) of the tokens (q: the SLO's TBT quantile) come from
  iterations at most the SLO long: those hold at most the b whose decode meets the SLO.
* tokens: every prompt and output token passes the slowest pipeline stage, which spends at least
  the token's share of its non-attention work (GEMMs, elementwise, TP all-reduce, LM head, CPU)
  at the largest batch an iteration may hold (the token budget; whole prompts for vLLM and Orca).
* KV (Little's law): a request holds at least its context in the KV cache for each of its
  output tokens, each at least one single-sequence decode long; the cache holds its capacity.

A probe of N requests may run over its sustainable rate for a while before the median
scheduling delay passes its limit: the running set absorbs up to b requests and the delay limit
d another rate x d, so the bound is scaled by 1 + 2 (b + rate x d) / N (N: the full probe).

Under DistServe's attainment criterion (a share of requests each within TTFT and TPOT) the pooled
TBT-sample argument above does not hold: there the decode bound is the throughput of any batch
the memory allows, a request whose single-sequence decode exceeds the TPOT limit cannot meet it,
and d is the TTFT limit (the requests that pass wait at most that; 2 / N covers their 90 %).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from engines.schedulers import make_policy
from harness.experiment import ExperimentPlan


@dataclass(frozen=True)
class Bound:
    qps: float  # no capacity above this
    binding: str  # which bound: decode, tokens, kv, slo
    decode_batch: int  # most sequences of a decode iteration that memory and max_num_seqs allow
    estimate_qps: float = 0.0  # the decode bound at the workload's mean context: no bound, an ordering hint


def shortest_decode_context(plan: ExperimentPlan) -> int:
    return int(plan.workload.prompt_lens.min()) + 1


def _fastest_perf(plan: ExperimentPlan):
    """The deployment's performance model as the bounds need it: for DP ranks sharing expert-parallel
    MoE layers, a rank's batch with the other ranks on their dummy batch (engines.perf.expert_parallel:
    no lockstep step holding the batch is shorter); else the model itself."""
    return getattr(plan.deployment.perf, "fastest", plan.deployment.perf)


def single_decode_s(plan: ExperimentPlan) -> float:
    """The fastest decode the deployment runs: one sequence at the shortest context, through every
    stage. No TBT sample of any of its schedulers is shorter."""
    perf = _fastest_perf(plan)
    c = shortest_decode_context(plan)
    return float(perf.pipeline_latency(np.ones(1, dtype=np.int64), np.full(1, c, dtype=np.int64)))


def _policy(plan: ExperimentPlan, scheduler: str):
    """The scheduler's policy object: what the bounds ask (reserves_kv, max_num_seqs, max_batch_tokens)."""
    return make_policy(plan.schedulers[scheduler], plan.max_model_len)


def _kv_batch(plan: ExperimentPlan, policy) -> int:
    """The most sequences the KV cache holds at once, of the smallest prompts (whole blocks)."""
    d = plan.deployment
    blocks = d.kv_capacity_tokens // d.block_size
    if policy.reserves_kv:  # max_model_len of KV per request
        return max(1, blocks // -(-plan.max_model_len // d.block_size))
    need = np.sort(-(-(plan.workload.prompt_lens + 1) // d.block_size))
    return max(1, int(np.searchsorted(np.cumsum(need), blocks, side="right")))


def _decode_latency(perf, b: int, c: int) -> float:
    return float(perf.pipeline_latency(np.ones(b, dtype=np.int64), np.full(b, c, dtype=np.int64)))


def _best_rate(perf, up_to: int, c: int) -> float:
    """max over b <= up_to of b / (decode of b): checked at every multiple of 16 (tile edges) and at up_to."""
    sizes = sorted({*range(16, up_to + 1, 16), up_to, min(8, up_to), 1})
    return max(b / float(perf.batch_times(np.ones(b, dtype=np.int64), np.full(b, c, dtype=np.int64))) for b in sizes)


def _slo_batch(perf, up_to: int, c: int, slo_s: float) -> int:
    """The largest b <= up_to whose decode latency meets the SLO (0 if even one sequence misses it)."""
    if _decode_latency(perf, 1, c) > slo_s:
        return 0
    lo, hi = 1, up_to
    while lo < hi:  # latency grows with b
        mid = (lo + hi + 1) // 2
        if _decode_latency(perf, mid, c) <= slo_s:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _token_cost(perf, most_tokens: int) -> float:
    """Least seconds per token the slowest stage spends outside attention, at most `most_tokens` a batch."""
    sizes = sorted({n for n in (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384) if n <= most_tokens} | {most_tokens})
    parts = {n: perf.breakdown([n], [0]) for n in sizes}
    return min((p["total"] - p["attention"]) / n for n, p in parts.items())


def _most_tokens(plan: ExperimentPlan, policy) -> int:
    """Most tokens one iteration holds: the policy's limit, else whole prompts of a full batch."""
    return int(policy.max_batch_tokens or int(policy.max_num_seqs) * plan.max_model_len)


def ttft_floors_s(plan: ExperimentPlan) -> np.ndarray:
    """Each request's least possible TTFT on the deployment, whatever the scheduler: its prompt's
    tokens through the slowest stage at the least a token costs there outside attention, at any
    batch a scheduler of the plan may form (the tokens bound's fact, for one request)."""
    most = max(_most_tokens(plan, _policy(plan, name)) for name in plan.schedulers)
    return plan.workload.prompt_lens.astype(np.float64) * _token_cost(_fastest_perf(plan), most)


def decode_limit_s(plan: ExperimentPlan) -> float:
    """What one decode must meet: the TBT SLO under the paper's criterion, the per-request TPOT
    limit under attainment (Slo.tpot_s, the TBT SLO unless set)."""
    return plan.slo.tbt_s if plan.slo.criterion == "paper" else plan.slo.tpot_limit_s


def _decode_token_rate(perf, plan: ExperimentPlan, batch: int, slo_batch: int, c: int) -> float:
    """Most decode tokens a second a passing probe sustains (module docstring)."""
    every = _best_rate(perf, batch, c)
    if plan.slo.criterion != "paper":
        return every
    q = plan.slo.tbt_quantile
    return 1.0 / (q / _best_rate(perf, slo_batch, c) + (1 - q) / every)


def capacity_bound(plan: ExperimentPlan, scheduler: str, prefill: int = 0, decode: int = 1) -> Bound:
    """No probe of `scheduler` on `plan`'s deployment passes above `qps` (module docstring); with
    `prefill` > 0, of a P/D unit (`plan.disagg`, `prefill` and `decode` instances), from each role's
    share of the same facts: every prompt token passes the slowest stage of a prefill instance (at
    most the scheduler's batch of tokens); on a decode instance, the decode bound (its KV pool and
    max_num_seqs; token 2's TBT sample holds the transfer and any wait, so it too lasts at least its
    iteration), its output tokens through the slowest stage, and Little's law on its KV. The unit is
    at most min(P x prefill rate, D x decode rate); under attainment, as for one engine."""
    policy, w = _policy(plan, scheduler), plan.workload
    dplan = replace(plan, deployment=plan.disagg.decode) if prefill else plan  # where the decodes run
    perf = dplan.deployment.perf
    c = shortest_decode_context(plan)
    p, o = w.prompt_lens.astype(np.float64), w.output_lens.astype(np.float64)
    batch = min(int(policy.max_num_seqs), _kv_batch(dplan, policy))
    slo_batch = min(batch, _slo_batch(perf, batch, c, decode_limit_s(plan)))
    if slo_batch == 0:
        return Bound(0.0, "slo", batch)
    rates, outputs = {}, max(float(np.mean(o - 1)), 1e-9)
    if prefill:
        pplan = replace(plan, deployment=plan.disagg.prefill)
        rates["prefill"] = prefill / (float(np.mean(p)) * _token_cost(pplan.deployment.perf, _most_tokens(pplan, policy)))
    rates["decode"] = decode * _decode_token_rate(perf, plan, batch, slo_batch, c) / outputs
    if prefill:
        rates["tokens"] = decode / (outputs * _token_cost(perf, batch))
    else:
        rates["tokens"] = 1.0 / (float(np.mean(p + o - 1)) * _token_cost(perf, _most_tokens(plan, policy)))
    reserved = policy.reserves_kv and not prefill  # max_model_len of KV per request (a decode role reserves none)
    held = plan.max_model_len * (o - 1) if reserved else (o - 1) * p + (o - 1) * o / 2
    rates["kv"] = decode * dplan.deployment.kv_capacity_tokens / max(float(np.mean(held)) * _decode_latency(perf, 1, c), 1e-12)
    binding = min(rates, key=rates.get)
    rate = rates[binding]
    absorbed = prefill * int(policy.max_num_seqs) + decode * batch  # requests the running sets hold
    waited = plan.slo.scheduling_delay_s if plan.slo.criterion == "paper" else float(plan.slo.ttft_s)  # SLO's wait
    slack = 1 + 2 * (absorbed + rate * waited) / len(w.prompt_lens)
    typical = decode * _typical_decode(dplan, batch, o)
    return Bound(rate * slack, binding, batch, min(rate, min(rates["prefill"], typical) if prefill else typical))


def data_parallel_bound(plan: ExperimentPlan, scheduler: str) -> Bound:
    """DP ranks sharing expert-parallel MoE layers: at most dp times one rank's bound, that rank's
    steps priced at their fastest (`_fastest_perf`), its own KV pool and batch."""
    fast = _fastest_perf(plan)
    one = capacity_bound(replace(plan, deployment=replace(plan.deployment, perf=fast, timer=fast)), scheduler)
    dp = plan.deployment.dp
    return Bound(one.qps * dp, one.binding, one.decode_batch, one.estimate_qps * dp)


def _typical_decode(plan: ExperimentPlan, batch: int, o: np.ndarray) -> float:
    """The decode bound's arithmetic at the mean context a decode sees (mean prompt + half the mean
    output) instead of the shortest: not a bound (contexts vary), a better guess of which
    configurations meet a strict SLO, for ordering the search."""
    perf = plan.deployment.perf
    c = int(np.mean(plan.workload.prompt_lens) + np.mean(o) / 2)
    b = _slo_batch(perf, batch, c, decode_limit_s(plan))
    return 0.0 if b == 0 else _best_rate(perf, b, c) / max(float(np.mean(o - 1)), 1e-9)
