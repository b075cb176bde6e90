"""Beyond the paper: conversations, agents and prefix caching (issue 30): its cells (`matrix`),
figure, table and report part (`figs`)."""
from __future__ import annotations

from harness.analysis.study import FigureSpec, Study, lazy

STUDY = Study("prefix", cells=lazy("harness.analysis.prefix.matrix:prefix_cells"), figures=(
    FigureSpec("fig18_prefix_caching", "Conversations and agents, with and without prefix caching (beyond the paper)",
               lambda i: lazy("harness.analysis.prefix.figs:fig_prefix")(i.prefix, i.prefix_probes),
               "Yi-34B TP2 on 2x A100-80G, 2,048 requests per probe. Capacity of Sarathi-Serve against its token "
               "budget (lines), vLLM and Orca (horizontal), with the engine's prefix cache (solid) and without "
               "(dotted), for ShareGPT conversations (each turn carries the conversation so far) and agent "
               "transcripts (a 4,000-token head, a tail growing by a step), at the paper's strict and relaxed TBT "
               "SLOs. Log scales."),
), parts=lazy("harness.analysis.prefix.figs:parts"))
