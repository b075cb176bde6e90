"""The prefill/decode study's cells: the two single-node deployments on four instances' GPUs,
colocated replicas of Sarathi-Serve and vLLM against every prefill:decode split of the same GPUs,
judged by the paper's criterion and by DistServe's attainment at two TTFT SLOs; and DistServe's
own chatbot cell."""
from __future__ import annotations

from harness.analysis.study import Cell

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


def cells() -> list[Cell]:
    """The study's cells: the layouts, then DistServe's."""
    return [*pd_cells(), *distserve_cells()]
