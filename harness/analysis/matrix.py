"""The runs the report is built from: the paper's matrix as `python -m harness` override lists.

Main cells: the 8 presets (4 deployments x strict/relaxed, sharegpt). Extras: the arxiv cells of
the two single-node deployments (Fig. 10), Falcon-180B on TP-8 for vLLM (Fig. 13), Table 4's
ablations at one rate per dataset, and vLLM vs Sarathi-Serve at one rate (Fig. 1 timeline).
Beyond the paper (`pd_cells`): the two single-node deployments on four instances' GPUs, colocated
replicas of Sarathi-Serve and vLLM against every prefill:decode split of the same GPUs, judged by
the paper's criterion and by DistServe's attainment at two TTFT SLOs.
"""
from __future__ import annotations

from dataclasses import dataclass

PRESETS = (
    "mistral7b_strict", "mistral7b_relaxed", "yi34b_tp2_strict", "yi34b_tp2_relaxed",
    "llama2_70b_tp4pp2_strict", "llama2_70b_tp4pp2_relaxed", "falcon180b_tp4pp2_strict", "falcon180b_tp4pp2_relaxed",
)
ABLATION = ("scheduler=[sarathi,hybrid_only,chunked_only]", "scheduler.sarathi.token_budget=1024")


@dataclass(frozen=True)
class Cell:
    name: str  # what the run is for
    overrides: tuple[str, ...]
    group: str  # main | extra


def paper_matrix(include_extras: bool = True) -> tuple[Cell, ...]:
    cells = [Cell(p, (f"experiment={p}",), "main") for p in PRESETS]
    if include_extras:
        for p in ("mistral7b", "yi34b_tp2"):
            for kind in ("strict", "relaxed"):
                cells.append(Cell(f"{p}_{kind}_arxiv", (f"experiment={p}_{kind}", "dataset=arxiv_summarization"), "extra"))
        for kind in ("strict", "relaxed"):
            cells.append(Cell(f"falcon180b_tp8_{kind}", (f"experiment=falcon180b_tp4pp2_{kind}", "parallel=tp8",
                                                          f"name=falcon180b_tp8_{kind}", "scheduler=[vllm]"), "extra"))
        cells.append(Cell("table4_sharegpt", ("experiment=yi34b_tp2_strict", "name=yi34b_tp2_ablation", *ABLATION,
                                              "search.fixed_qps=1.0", "search.num_requests=128"), "extra"))
        cells.append(Cell("table4_arxiv", ("experiment=yi34b_tp2_strict", "name=yi34b_tp2_ablation",
                                           "dataset=arxiv_summarization", *ABLATION, "search.fixed_qps=0.25",
                                           "search.num_requests=128"), "extra"))
        cells.append(Cell("fig1_fixed_rate", ("experiment=yi34b_tp2_strict", "name=yi34b_tp2_fixed_rate",
                                              "scheduler=[sarathi,vllm]", "search.fixed_qps=1.0"), "extra"))
        cells.extend(pd_cells())
        cells.extend(distserve_cells())
        cells.extend(prefix_cells())
    return tuple(cells)


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


# Prefill/decode study (issue 17 item 5). Four instances of each deployment (4 and 8 GPUs), the
# router that balances by load (least_outstanding), 1,024 requests per probe (4 instances' worth
# of load at a quarter of the paper's 2,048-request probes' simulation cost each). Each preset's
# model, GPU and TP, for the TTFT SLOs below (tests/test_analysis_pd.py checks them against the presets).
PD_DEPLOYMENTS: dict[str, tuple[str, str, int]] = {
    "mistral7b_strict": ("mistral-7b", "a100-80g-pcie", 1),
    "yi34b_tp2_strict": ("yi-34b", "a100-80g-pcie", 2),
}
PD_INSTANCES = 4
PD_REQUESTS = 1024
# How each layout is judged: the paper's criterion, and DistServe's (90 % of requests within a TTFT
# and a TPOT SLO; TPOT is the deployment's strict TBT SLO). The TTFT SLO follows the paper's way of
# deriving its TBT SLO (a multiple of an operation's unloaded time on the deployment): a multiple of
# the time to prefill one 2,048-token prompt alone, tight and loose. The multiples are this study's.
PD_TTFT_PROMPT = 2048
PD_TTFT_MULTIPLIERS = {"tight": 5.0, "loose": 20.0}
PD_CRITERIA = ("paper", *PD_TTFT_MULTIPLIERS)


def pd_ttft_slo(preset: str, kind: str) -> float:
    """Seconds: the multiple `kind` of one unloaded 2,048-token prefill on `preset`'s deployment
    (engines.perf, the presets' default engine stack), to two significant digits."""
    import numpy as np

    from engines.perf import Deployment, PerfModel
    from engines.perf.queries import single_prefill_times

    model, gpu, tp = PD_DEPLOYMENTS[preset]
    t = float(single_prefill_times(PerfModel(Deployment.create(model=model, gpu=gpu, tp=tp)), np.array([PD_TTFT_PROMPT]))[0])
    return float(f"{PD_TTFT_MULTIPLIERS[kind] * t:.2g}")


def pd_layouts(instances: int = PD_INSTANCES) -> dict[str, tuple[str, ...]]:
    """Layout name -> overrides: colocated replicas (Sarathi-Serve and vLLM), then every
    prefill:decode split with vLLM's whole-prompt prefills (DistServe's prefill instances)."""
    out = {f"x{instances}": (f"cluster.instances={instances}", "scheduler=[sarathi,vllm]")}
    for p in range(1, instances):
        out[f"{p}p{instances - p}d"] = (f"cluster.prefill_instances={p}", f"cluster.decode_instances={instances - p}",
                                         "scheduler=[vllm]")
    return out


def pd_cells() -> list[Cell]:
    cells = []
    for preset in PD_DEPLOYMENTS:
        for crit in PD_CRITERIA:
            judged = () if crit == "paper" else ("slo.criterion=attainment", f"slo.ttft_s={pd_ttft_slo(preset, crit)}")
            for layout, overrides in pd_layouts().items():
                name = f"pd_{preset.removesuffix('_strict')}_{crit}_{layout}"
                cells.append(Cell(name, (f"experiment={preset}", f"name={name}", *overrides, *judged,
                                         "cluster.router=least_outstanding", f"search.num_requests={PD_REQUESTS}"), "pd"))
    return cells


def distserve_cells() -> list[Cell]:
    """DistServe's (OSDI'24) Fig. 8 chatbot cell: its vLLM baseline on one GPU and its layout (one
    prefill instance on 2 GPUs with PP=2, one decode instance on 1 GPU); data/paper/distserve_osdi24.yaml."""
    base = ("experiment=distserve_opt13b_chatbot", f"search.num_requests={PD_REQUESTS}")
    return [Cell("distserve_opt13b_chatbot", base, "pd"),
            Cell("distserve_opt13b_chatbot_2p1d", (*base, "name=distserve_opt13b_chatbot_2p1d", "cluster.prefill_instances=1",
                                                   "cluster.prefill_pp=2", "cluster.decode_instances=1"), "pd")]
