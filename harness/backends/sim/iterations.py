"""The simulator's iteration log (BackendJob.iteration_log): what each iteration ran and when.

One row per iteration (with pipeline parallelism, per micro-batch: from its launch to its last
stage's end): its start and end, its composition (prefill tokens and sequences, decodes, the
chunk's context, the decodes' mean context), and for a hybrid iteration (a prefill chunk with
decodes; pp = 1) the performance model's price of its prefill part alone and of a decode-only batch
of B sequences, the riders and the rest at their mean context (the first Sarathi paper's decode-only
batch of B, against which its B - 1 riding decodes are compared, Sec. 5.1; its table gives each
row's B): B is the run's batch, the requests a closed loop keeps in flight, as the baseline's
decode-only iterations run it, or, without one, the iteration's decodes + 1. From these the marginal
cost of a decode that rides on a chunk and the decode speedup follow (harness/throughput.py). The
loops call it only when one is given: a run without it is untouched.

Pipeline bubbles (pp > 1): before a micro-batch, each stage may sit idle since its previous
micro-batch. That gap is split by cause:
  schedule  stage 0 idle: nothing could be launched (pp micro-batches in flight, every runnable
            sequence in flight, or no request);
  send      a later stage waiting for the activations to arrive over the stage-to-stage link;
  upstream  a later stage waiting for the micro-batch to clear the stages before it (the
            pipeline filling, and micro-batches of uneven cost: a long prefill ahead of a short
            decode batch leaves the next stages idle).
A request's bubble time is the sum of the gaps before every micro-batch that carried it: the idle
stage-time spent waiting for its work.
"""
from __future__ import annotations

import numpy as np

from engines.core import Batch

COLUMNS = ("start_s", "end_s", "prefill_tokens", "prefills", "decodes", "prefill_context", "decode_context_mean",
           "alone_prefill_s", "alone_decodes_s", "alone_decodes_n", "bubble_schedule_s", "bubble_send_s",
           "bubble_upstream_s", "cached_tokens")  # prompt tokens a prefix cache held for the requests this iteration admitted
CAUSES = ("schedule", "send", "upstream")


class IterationLog:
    def __init__(self, timer, num_requests: int, batch: int | None = None) -> None:
        self.timer = timer
        self.batch = batch or 0  # B of the decode-only batch a hybrid's riders are compared with (0: decodes + 1)
        self.rows: list[tuple] = []
        self.runs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # decode runs: starts, ends, first contexts
        self.bubbles = np.zeros((num_requests, len(CAUSES)))  # by engine sequence id (arrival rank)
        self.order: list[int] | None = None
        self.cache = None  # the engine's PrefixCacheStats, when it keeps a prefix cache
        self._hits = 0

    def bind(self, order) -> None:
        """order[rank] = the input index of the request the engine knows as sequence `rank`."""
        self.order = list(order)

    def iteration(self, batch: Batch, start: float, end: float, gaps=(np.nan, np.nan, np.nan), price: bool = True) -> None:
        """`price`: a hybrid iteration's parts are priced alone (not for a micro-batch, whose start
        and end span every stage and the waits between them, not one iteration's cost)."""
        n = batch.new_tokens
        pre = [i for i, p in enumerate(batch.is_prefill) if p]
        dec = [i for i, p in enumerate(batch.is_prefill) if not p]
        alone_p = alone_d = np.nan
        alone_n = 0
        ctx = [batch.context_lens[i] for i in dec]
        if pre and dec and price:  # hybrid: the model's price of the chunk alone and of a decode-only batch of B
            alone_p = self._price([n[i] for i in pre], [batch.context_lens[i] for i in pre])
            alone_n = max(self.batch, len(dec) + 1)
            alone_d = self._price([1] * alone_n, ctx + [round(float(np.mean(ctx)))] * (alone_n - len(dec)))
        saved = 0
        if self.cache is not None:  # admissions happen while this iteration is scheduled: what they found
            saved, self._hits = self.cache.hits - self._hits, self.cache.hits
        self.rows.append((start, end, sum(n[i] for i in pre), len(pre), len(dec),
                          batch.context_lens[pre[0]] if pre else -1, float(np.mean(ctx)) if ctx else np.nan,
                          alone_p, alone_d, alone_n, *gaps, saved))

    def decode_run(self, batch: Batch, starts: np.ndarray, ends: np.ndarray) -> None:
        """`len(ends)` repetitions of a decode-only batch (the fast-forward), contexts growing by one."""
        self.runs.append((np.asarray(starts, dtype=np.float64), np.asarray(ends, dtype=np.float64),
                          np.asarray(batch.context_lens, dtype=np.int64)))

    def launch(self, batch: Batch, t: float, free_before: list[float], stages: list[float], send: float,
               free_after: list[float]) -> None:
        """A micro-batch launched at `t` through the stages (pipeline.Pipeline._launch's arithmetic):
        stage s ran it from free_after[s] - stages[s]; it had been free since free_before[s]."""
        gaps = [0.0, 0.0, 0.0]
        ready = t
        for s, (before, dur, after) in enumerate(zip(free_before, stages, free_after)):
            start = after - dur
            idle = max(0.0, start - before)
            if s == 0:
                gaps[0] += idle
            else:  # idle from `before` to `ready`, of which the last `send` seconds waited for the transfer
                sending = max(0.0, min(idle, ready - max(before, ready - send)))
                gaps[1] += sending
                gaps[2] += idle - sending
            ready = after + send
        for seq in batch.seqs:
            self.bubbles[seq.seq_id] += gaps
        self.iteration(batch, t, free_after[-1], tuple(gaps), price=False)

    def _price(self, new_tokens: list[int], context_lens: list[int]) -> float:
        return float(self.timer.batch_times(np.asarray(new_tokens, dtype=np.int64),
                                            np.asarray(context_lens, dtype=np.int64)))

    def columns(self) -> dict[str, np.ndarray]:
        """Every iteration in start order, as columns (COLUMNS)."""
        parts = [np.array(self.rows, dtype=np.float64).reshape(-1, len(COLUMNS))]
        for starts, ends, ctx in self.runs:
            k = len(ends)
            block = np.full((k, len(COLUMNS)), np.nan)
            block[:, 0], block[:, 1] = starts, ends
            block[:, 2], block[:, 3], block[:, 4], block[:, 5] = 0, 0, len(ctx), -1
            block[:, COLUMNS.index("alone_decodes_n")] = block[:, COLUMNS.index("cached_tokens")] = 0
            block[:, 6] = np.mean(ctx[None, :] + np.arange(k)[:, None], axis=1)  # as iteration() takes each mean
            parts.append(block)
        table = np.concatenate(parts)
        table = table[np.argsort(table[:, 0], kind="stable")]
        out = {c: table[:, i] for i, c in enumerate(COLUMNS)}
        for c in ("prefill_tokens", "prefills", "decodes", "prefill_context", "alone_decodes_n", "cached_tokens"):
            out[c] = out[c].astype(np.int64)
        return out

    def request_bubbles(self) -> dict[str, np.ndarray]:
        """Per request, in input order: bubble seconds by cause (all 0 without a pipeline)."""
        b = self.bubbles
        if self.order is not None:
            b = np.empty_like(self.bubbles)
            b[self.order] = self.bubbles
        return {f"bubble_{c}_s": b[:, i].copy() for i, c in enumerate(CAUSES)}
