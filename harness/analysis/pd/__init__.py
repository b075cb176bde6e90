"""Beyond the paper: one pool of GPUs or prefill and decode apart (issue 17), and DistServe's
published chatbot cell: its cells (`matrix`), figure, tables and report part (`figs`)."""
from __future__ import annotations

from harness.analysis.study import FigureSpec, Study, lazy

STUDY = Study("pd", cells=lazy("harness.analysis.pd.matrix:cells"), figures=(
    FigureSpec("fig17_prefill_decode", "Colocated chunked prefills vs disaggregated prefill/decode, at equal GPUs (beyond the paper)",
               lambda i: lazy("harness.analysis.pd.figs:fig_pd")(i.clusters),
               "Each deployment's GPUs as four colocated replicas (Sarathi-Serve, vLLM; least-outstanding routing) or "
               "split into prefill and decode instances (P:D; vLLM's whole-prompt prefills, KV moved after each "
               "prefill over the node's links), 1,024 requests per probe; one row per deployment. Left: "
               "the paper's criterion, under which the splits with one decode instance come out best; it cannot see "
               "a request's one long wait for a decode slot (one gap per request is under 1 % of the pooled TBT "
               "samples). Middle and right: DistServe's criterion (90 % of requests within a TTFT SLO, a multiple of "
               "one unloaded 2,048-token prefill, and a per-request TPOT SLO, the deployment's strict TBT SLO), "
               "which does: there a colocated layout wins, vLLM's prefill-first one when TTFT is tight and "
               "Sarathi-Serve's when it is loose, and the best split stays below the winner, because a decode instance's "
               "KV pool holds few requests' contexts while the prefill instances' memory goes unused for them. "
               "The best value in each panel is bold."),
), parts=lazy("harness.analysis.pd.figs:parts"))
