"""`search`: the capacity search (experiments/search/*.yaml)."""
from __future__ import annotations

import math
from dataclasses import dataclass

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class SearchSettings:
    """The capacity search; the defaults are the paper's (Sarathi-Serve Sec. 5: 2048 requests per
    probe, binary search on QPS to ~2.5 %). The schema of experiments/search/*.yaml."""

    num_requests: int = 2048
    start_qps: float = 1.0
    # The bracket's step: x growth while probes pass, / growth while they fail (2: the paper's
    # doubling); a smaller step suits a search started near its answer (fewer bisections after).
    growth: float = 2.0
    rel_tol: float = 0.025
    min_qps: float = 0.01
    max_qps: float = 1000.0
    time_limit_s: float | None = None  # stop a probe at this time; unfinished requests count against it
    repeats: int = 1  # capacity searches with seeds seed, seed+1, ...
    fixed_qps: float | None = None  # run one probe at this rate instead of a search
    max_error_fraction: float = 0.0  # a probe with more failed requests than this share fails (and says why)
    workers: int = 1  # probes at once: each round of the search probes this many rates (deterministic backends)
    executor: str = "local"  # where a round's probes run: local (a process pool here) | ray (harness.search.executor)
    ray_address: str | None = None  # executor=ray: null = a local Ray for the run (or the Ray this job runs in), auto, HOST:PORT
    # Stop a simulated probe once failing the paper's criterion is certain (one engine or colocated
    # instances in one loop; the verdict is the same, its records end there, marked): the planner's
    # screening probes and the fleet study use it.
    stop_early: bool = False
    # Searches at once (one per scheduler and seed), each in a local process, simulated backends only:
    # 0 = one per CPU where probes have >= 512 requests (harness.search.executor.searches_at_once), 1 = serial.
    searches_at_once: int = 0

    def __post_init__(self) -> None:
        for ok, message in (
            (self.num_requests >= 1, f"num_requests must be >= 1, got {self.num_requests}"),
            (self.repeats >= 1, f"repeats must be >= 1, got {self.repeats}"),
            (self.fixed_qps is None or (self.fixed_qps > 0 and math.isfinite(self.fixed_qps)),
             f"fixed_qps must be a positive rate, got {self.fixed_qps}"),
            (0 < self.min_qps <= self.start_qps <= self.max_qps,
             f"need 0 < min_qps <= start_qps <= max_qps, got {self.min_qps}, {self.start_qps}, {self.max_qps}"),
            (self.growth > 1 and math.isfinite(self.growth), "growth must be a finite factor > 1 (the bracket's step: "
             f"x growth while probes pass, / growth while they fail), got {self.growth}"),
            (0 < self.rel_tol < 1, f"rel_tol must be in (0, 1), got {self.rel_tol}"),
            (0 <= self.max_error_fraction <= 1, f"max_error_fraction must be in [0, 1], got {self.max_error_fraction}"),
            (self.time_limit_s is None or self.time_limit_s > 0, f"time_limit_s must be > 0, got {self.time_limit_s}"),
            (self.workers >= 1, f"workers must be >= 1 (1: the serial search), got {self.workers}"),
            (self.searches_at_once >= 0, f"searches_at_once must be >= 0 (0: one per CPU), got {self.searches_at_once}"),
            (self.executor in EXECUTORS, f"executor must be one of {', '.join(EXECUTORS)}, got {self.executor!r}"),
        ):
            if not ok:
                raise ValueError(message)
