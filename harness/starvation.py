"""Starvation beside the paper's criterion, never part of it.

A probe can pass the paper's criterion (P99 TBT over every token, median scheduling delay) while a
minority of its requests waits for most of the probe: long prompts behind a shortest-prompt-first
queue, say. Neither statistic sees them: their tokens are a small share of the TBT samples, and
they are fewer than half of the requests. The issue that added this check found exactly that:
shortest-prompt-first "won" Mistral-7B strict at 13.5 QPS (Sarathi: 3.0) with a P99 TTFT of
149.5 s while completing 2.79 requests a second. Two signs flag a passing probe, in the run's
table, in summary.json (each probe's `starvation`) and in REPORT.md:

* completed throughput below STARVED_THROUGHPUT_FRACTION of the arrival rate: a probe of N
  requests arriving over N / qps seconds completes N / (N / qps + drain) a second, so below half
  the arrival rate its last request finished more than a whole arrival window after the last
  arrival (the backlog, not the arrivals, set the probe's length). Stable probes of the paper's
  2,048 requests complete 0.9-0.96 of their rate (results/reference, at capacity).
* P99 TTFT above STARVED_TTFT_P99_S: one request in a hundred waited over a minute for its first
  token, thirty times the paper's 2 s median scheduling-delay limit. The reference's highest at
  capacity: vLLM on LLaMA2-70B relaxed (131 s) and Orca on LLaMA2-70B and Falcon-180B (65-69 s);
  Sarathi-Serve's stays under 26 s.
"""
from __future__ import annotations

import math

STARVED_THROUGHPUT_FRACTION = 0.5
STARVED_TTFT_P99_S = 60.0
BOUNDS = {"completed_fraction_of_rate": STARVED_THROUGHPUT_FRACTION, "ttft_p99_s": STARVED_TTFT_P99_S}


def starvation(passed: bool, qps: float, completed_per_s: float, ttft_p99_s: float) -> str:
    """Why a passing probe looks starved ("" when it does not, or when it failed the criterion)."""
    if not passed:
        return ""
    signs = []
    if math.isfinite(completed_per_s) and completed_per_s < STARVED_THROUGHPUT_FRACTION * qps:
        signs.append(f"completed {completed_per_s:.3g} req/s of {qps:.4g} arriving")
    if ttft_p99_s > STARVED_TTFT_P99_S:
        signs.append(f"P99 TTFT {ttft_p99_s:.4g} s > {STARVED_TTFT_P99_S:g} s")
    return "; ".join(signs)
