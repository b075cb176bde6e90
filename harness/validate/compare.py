"""Sim vs real, request by request: the statistics both sides are judged on, and their signed errors.

TTFT = first token - arrival; TPOT = (last token - first token) / (output tokens - 1), per request
with two tokens or more (the metric harness.metrics calls tpot); ITL = every gap between two
tokens of a request (only where the run kept each token's time); E2E = last token - arrival.
A request is compared when the run finished it without error and the simulator finished it too.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.records import RequestRecord

METRICS = ("ttft", "tpot", "itl", "e2e")
STATS = ("mean", "p50", "p90", "p99")
# What --max-error and a calibration's held-out error judge: the central statistics of the three
# per-request latencies. P99s and ITL are printed, not judged: over a hundred requests a P99 is one
# or two of them, and ITL on a shared host is scheduling noise as much as the engine.
HEADLINE = tuple(f"{m}.{s}" for m in ("ttft", "tpot", "e2e") for s in ("mean", "p50", "p90"))


@dataclass(frozen=True)
class Row:
    metric: str
    stat: str
    real: float
    sim: float

    @property
    def key(self) -> str:
        return f"{self.metric}.{self.stat}"

    @property
    def error(self) -> float:
        """(sim - real) / real: positive when the simulator is slower than the engine."""
        return (self.sim - self.real) / self.real if self.real > 0 else math.nan


@dataclass(frozen=True)
class Comparison:
    rows: tuple[Row, ...]
    compared: int
    dropped_real: int  # in the run file, not compared (an error, nothing generated)
    dropped_sim: int  # finished by the engine, not by the simulator

    def row(self, key: str) -> Row | None:
        return next((r for r in self.rows if r.key == key), None)

    def headline_error(self) -> float:
        """The largest |signed error| of the HEADLINE statistics."""
        errs = [abs(r.error) for r in self.rows if r.key in HEADLINE and math.isfinite(r.error)]
        return max(errs) if errs else math.nan

    def signed(self) -> dict[str, float]:
        return {r.key: r.error for r in self.rows}


def samples(records: Sequence[RequestRecord], metric: str) -> np.ndarray:
    if metric == "ttft":
        return np.array([r.first_token_s - r.arrival_s for r in records])
    if metric == "e2e":
        return np.array([r.finished_s - r.arrival_s for r in records])
    if metric == "tpot":
        return np.array([(r.finished_s - r.first_token_s) / (r.output_len - 1) for r in records if r.output_len > 1])
    if metric == "itl":
        gaps = [np.diff(r.token_times_s) for r in records if len(r.token_times_s) == r.output_len > 1]
        return np.concatenate(gaps) if gaps else np.array([])
    raise ValueError(metric)


# TTFT and TPOT errors both beyond this, in opposite directions: a capacity mismatch, not a speed one.
MISMATCH = 0.10


def capacity_mismatch(c: Comparison, when: str) -> str | None:
    """A line when the simulator's TTFT and TPOT (means) err in opposite directions, each by more
    than MISMATCH: its requests wait longer (or shorter) for a first token while each token comes
    faster (or slower). No speed factor moves both ways at once; the usual cause is the KV cache's
    size (admission, preemption) or the scheduler's limits, not the kernels' speed: give the engine's
    logged KV size (--kv-tokens) or its limits rather than trusting factors fitted across it."""
    ttft, tpot = c.row("ttft.mean"), c.row("tpot.mean")
    if ttft is None or tpot is None or not (math.isfinite(ttft.error) and math.isfinite(tpot.error)):
        return None
    if min(abs(ttft.error), abs(tpot.error)) <= MISMATCH or (ttft.error > 0) == (tpot.error > 0):
        return None
    return (f"{when}: TTFT {100 * ttft.error:+.0f}% but TPOT {100 * tpot.error:+.0f}% (opposite directions): "
            f"a capacity mismatch (KV cache size, scheduler limits), not a speed one; factors fitted across it "
            f"trade one speed against the other")


def _stat(x: np.ndarray, stat: str) -> float:
    if len(x) == 0:
        return math.nan
    return float(np.mean(x)) if stat == "mean" else float(np.percentile(x, float(stat[1:])))


def compare(real: Sequence[RequestRecord], sim: Sequence[RequestRecord], dropped_real: int,
            per_token: bool) -> Comparison:
    """`sim[i]` is the simulator's record of `real[i]` (the same request replayed)."""
    ok = [i for i, s in enumerate(sim) if s.error is None and len(s.token_times_s) == s.output_len]
    r_ok, s_ok = [real[i] for i in ok], [sim[i] for i in ok]
    rows = []
    for metric in METRICS:
        if metric == "itl" and not per_token:
            continue
        a, b = samples(r_ok, metric), samples(s_ok, metric)
        rows += [Row(metric, stat, _stat(a, stat), _stat(b, stat)) for stat in STATS]
    return Comparison(tuple(rows), len(ok), dropped_real, len(sim) - len(ok))


def table(c: Comparison, title: str = "") -> str:
    """The comparison as a Markdown table (ms), the HEADLINE rows marked."""
    lines = ([f"{title}", ""] if title else []) + ["| metric | stat | real (ms) | sim (ms) | sim - real |",
                                                   "| --- | --- | ---: | ---: | ---: |"]
    for r in c.rows:
        mark = "" if r.key in HEADLINE else " (not judged)"
        lines.append(f"| {r.metric.upper()} | {r.stat}{mark} | {r.real * 1e3:.1f} | {r.sim * 1e3:.1f} | {100 * r.error:+.1f}% |")
    lines += ["", f"{c.compared} requests compared; {c.dropped_real} dropped from the run (errors, no output); "
                 f"{c.dropped_sim} unfinished in the simulator; largest headline error {100 * c.headline_error():.1f}%"]
    return "\n".join(lines)


def over_time(records: Sequence[RequestRecord], bin_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bin starts, output tokens per second, requests waiting for their first token), per bin."""
    end = max(r.finished_s for r in records)
    edges = np.arange(0.0, end + bin_s, bin_s)
    tok = np.concatenate([r.token_times_s if len(r.token_times_s) else np.linspace(r.first_token_s, r.finished_s, r.output_len)
                          for r in records])
    tput = np.histogram(tok, edges)[0] / bin_s
    arr = np.array([r.arrival_s for r in records])
    first = np.array([r.first_token_s for r in records])
    mids = edges[:-1] + bin_s / 2
    queue = np.array([np.sum((arr <= t) & (first > t)) for t in mids])
    return edges[:-1], tput, queue
