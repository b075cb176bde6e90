"""Counters the engine loop keeps, rendered as Prometheus text for `GET /metrics`.

Gauges are read from the engine when scraped (running, waiting, KV blocks); counters and the
iteration-time histogram are updated by the loop, on the event loop's thread only.
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

# Iteration times span 1 ms (tiny models, decode) to seconds (Falcon-180B prefills).
ITERATION_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass
class LoopStats:
    iterations: int = 0
    iteration_seconds_sum: float = 0.0
    iteration_buckets: list[int] = field(default_factory=lambda: [0] * (len(ITERATION_BUCKETS_S) + 1))
    prompt_tokens: int = 0  # prompt tokens computed, recomputation after preemption included
    generation_tokens: int = 0
    requests_received: int = 0
    requests_finished: int = 0
    requests_aborted: int = 0

    def iteration(self, seconds: float, prompt_tokens: int, generated: int) -> None:
        self.iterations += 1
        self.iteration_seconds_sum += seconds
        self.iteration_buckets[bisect_left(ITERATION_BUCKETS_S, seconds)] += 1
        self.prompt_tokens += prompt_tokens
        self.generation_tokens += generated


def render_prometheus(stats: LoopStats, *, running: int, waiting: int, blocks_used: int, blocks_total: int,
                      preemptions: int, model: str, executor_metrics: dict[str, float] | None = None,
                      prefix_cache=None, cached_blocks: int | None = None, books_balanced: bool | None = None) -> str:
    label = f'{{model_name="{model}"}}'
    lines: list[str] = []

    def metric(name: str, kind: str, help_: str, value: float) -> None:
        lines.append(f"# HELP engine:{name} {help_}")
        lines.append(f"# TYPE engine:{name} {kind}")
        lines.append(f"engine:{name}{label} {value}")

    metric("num_requests_running", "gauge", "Requests admitted to the engine (holding KV blocks).", running)
    metric("num_requests_waiting", "gauge", "Requests queued for admission.", waiting)
    metric("kv_blocks_used", "gauge", "KV-cache blocks in use.", blocks_used)
    metric("kv_blocks_total", "gauge", "KV-cache blocks in the pool.", blocks_total)
    metric("kv_cache_usage_perc", "gauge", "Share of KV-cache blocks in use (0-1).", blocks_used / blocks_total)
    metric("num_preemptions_total", "counter", "Preemptions by recompute.", preemptions)
    metric("prompt_tokens_total", "counter", "Prompt tokens computed (recomputation included).", stats.prompt_tokens)
    metric("generation_tokens_total", "counter", "Output tokens generated.", stats.generation_tokens)
    metric("requests_received_total", "counter", "Requests accepted by the engine.", stats.requests_received)
    metric("requests_finished_total", "counter", "Requests that generated all their tokens.", stats.requests_finished)
    metric("requests_aborted_total", "counter", "Requests aborted (client disconnect or shutdown).", stats.requests_aborted)

    if prefix_cache is not None:  # engines.core.PrefixCacheStats; vLLM's counters have these names and units
        metric("prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.", prefix_cache.queries)
        metric("prefix_cache_hits_total", "counter", "Of those, tokens found cached.", prefix_cache.hits)
    if cached_blocks is not None:
        metric("kv_blocks_cached", "gauge", "KV-cache blocks no request uses whose content a prefix cache keeps "
               "(counted free).", cached_blocks)
    if books_balanced is not None:
        metric("kv_books_balanced", "gauge", "1 if every KV block is free, cached or held with reference counts "
               "matching the requests' block tables (GET /metrics?audit=1).", int(books_balanced))
    for key, value in (executor_metrics or {}).items():
        metric(key, "counter", "The executor's own counter (see its metrics()).", value)

    name = "engine:iteration_time_seconds"
    lines.append(f"# HELP {name} Wall time of one engine iteration (schedule, execute, complete).")
    lines.append(f"# TYPE {name} histogram")
    cumulative = 0
    for bound, count in zip(ITERATION_BUCKETS_S, stats.iteration_buckets):
        cumulative += count
        lines.append(f'{name}_bucket{{model_name="{model}",le="{bound}"}} {cumulative}')
    lines.append(f'{name}_bucket{{model_name="{model}",le="+Inf"}} {stats.iterations}')
    lines.append(f"{name}_sum{label} {stats.iteration_seconds_sum}")
    lines.append(f"{name}_count{label} {stats.iterations}")
    return "\n".join(lines) + "\n"
