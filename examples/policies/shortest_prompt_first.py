"""Shortest-prompt-first: Sarathi-Serve's stall-free batching, but the waiting request with the
shortest (remaining) prompt is admitted first instead of the oldest. An example of a policy that
lives outside engines/: it registers itself with the decorator, and a package that ships it
names this module in its pyproject.toml so the harness finds it:

    [project.entry-points."sarathi_harness.policies"]
    shortest_prompt_first = "examples.policies.shortest_prompt_first"

Then `python -m harness experiment=mistral7b_strict scheduler=[sarathi,shortest_prompt_first]`.
Its knobs are SarathiPolicy's constructor parameters (token_budget, max_num_seqs,
chunked_prefill), with their defaults.

It passes the paper's capacity criterion (P99 TBT, median scheduling delay) at loads where long
prompts starve: the harness flags such probes (P99 TTFT and completed throughput beside the
verdict), which is what this policy is good for showing.
"""
from __future__ import annotations

from collections import deque

from engines.core import Batch, Engine
from engines.schedulers import Axis, Sweep, register_policy
from engines.schedulers.sarathi import SarathiPolicy


# No vllm=: vLLM admits FCFS, so nothing exports it. plan=: the planner tries its token budgets when
# asked (plan.grid.shortest_prompt_first.token_budget=[512,2048]), beside the built-ins.
@register_policy("shortest_prompt_first", plan=Sweep(Axis("token_budget", (), "b", "budget {}"),
                                                     Axis("max_num_seqs", (128,), "s", "batch {}", always=False)))
class ShortestPromptFirstPolicy(SarathiPolicy):
    """Stall-free batching admitting the shortest waiting prompt first (an example plugin)."""

    def schedule(self, engine: Engine) -> Batch | None:
        # SarathiPolicy admits from the head of engine.waiting (Engine.admit_next): order the queue
        # by remaining prompt, oldest first among equals, and admit as it does.
        if len(engine.waiting) > 1:
            engine.waiting = deque(sorted(engine.waiting, key=lambda s: (s.remaining_prefill, s.seq_id)))
        return super().schedule(engine)

    def decode_batch_repeats(self, engine: Engine) -> bool:
        """The default (yes) holds for FCFS only: a request arriving during a run of decode-only
        iterations queues behind the head that did not fit. Here a shorter one goes ahead of it
        and may fit, so the batch repeats only while nothing can be admitted at all: no request
        waits (the simulator then ends the run at the next arrival), or the running set is full
        (nothing finishes inside the run)."""
        return not engine.waiting or len(engine.running) >= self.max_num_seqs
