"""The prefix-caching study's cells: conversations and agents, with and without the engine's
prefix cache, at the paper's two SLOs on its main deployment."""
from __future__ import annotations

from harness.analysis.study import Cell

# Conversations and agents with and without prefix caching (issue 30): the paper's main deployment
# (experiment=prefix_yi34b_tp2: Sarathi-Serve at budgets 256..2048, vLLM, Orca), both SLOs, the
# paper's 2,048 requests per probe (fewer hold too few sessions: a probe of 1,024 conversation
# turns, ~215 sessions, cannot load Sarathi-Serve with a cache past its SLO at any rate).
PREFIX_WORKLOADS = {"conversations": "sharegpt_conversations", "agents": "agent_transcripts"}


def prefix_cells() -> list[Cell]:
    cells = []
    for kind in ("strict", "relaxed"):
        for short, dataset in PREFIX_WORKLOADS.items():
            for cached in (False, True):
                name = f"prefix_yi34b_tp2_{kind}_{short}_{'cache' if cached else 'nocache'}"
                cells.append(Cell(name, ("experiment=prefix_yi34b_tp2", f"slo.kind={kind}", f"dataset={dataset}",
                                         f"engine.prefix_caching={str(cached).lower()}", f"name={name}"), "extra"))
    return cells
