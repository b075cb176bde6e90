"""Disaggregated candidates of a plan (`plan.disaggregated=true`): units of P prefill + D decode
instances (Splitwise, DistServe, vLLM's P/D), each role one of the deployments that fit, planned
as the cluster experiment `cluster.prefill_instances=P cluster.decode_instances=D` with each
role's tp/pp (harness/backends/sim/disagg.py runs it). A unit is what the planner replicates: its
capacity is searched like any configuration's and the target needs ceil(target / capacity) units.

The prefill role runs the unit's scheduler on prompts only: vLLM's whole prefills
(`plan.pd_policies=[vllm]`, the default) or Sarathi-Serve's chunks (`sarathi`); the decode role
continues every request with the same max_num_seqs (engines/schedulers/decode_only.py).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from common.errors import HarnessError
from harness.settings.cluster import ClusterSettings
from harness.experiment import ExperimentPlan, plan_experiment
from harness.settings.deployment import ParallelSettings
from harness.settings.experiment import ExperimentConfig


@dataclass(frozen=True)
class Unit:
    """P prefill instances of (prefill_tp, prefill_pp) and D decode instances of (decode_tp, decode_pp)."""

    prefill: int
    prefill_tp: int
    prefill_pp: int
    decode: int
    decode_tp: int
    decode_pp: int

    @property
    def gpus(self) -> int:
        """As the cluster it runs as counts them (one count of a cluster's GPUs)."""
        return ClusterSettings(**self.cluster()).num_gpus(self.prefill_tp, self.prefill_pp)

    @property
    def layout(self) -> str:
        """2P(tp2):1D(tp2)"""
        def shape(tp: int, pp: int) -> str:
            return f"tp{tp}" + (f"pp{pp}" if pp > 1 else "")
        return (f"{self.prefill}P({shape(self.prefill_tp, self.prefill_pp)}):"
                f"{self.decode}D({shape(self.decode_tp, self.decode_pp)})")

    def cluster(self, copies: int = 1) -> dict:
        """The `cluster.*` overrides of `copies` units run as one cluster."""
        return {"instances": 1, "prefill_instances": self.prefill * copies, "decode_instances": self.decode * copies,
                "prefill_tp": self.prefill_tp, "prefill_pp": self.prefill_pp,
                "decode_tp": self.decode_tp, "decode_pp": self.decode_pp}


def unit_config(base: ExperimentConfig, unit: Unit, schedulers: Mapping, copies: int = 1) -> ExperimentConfig:
    """The experiment config of `copies` units: the base config's cluster settings (router, link,
    transfer mode, placement) with the unit's instances and roles; `parallel` is the prefill role's."""
    try:
        cluster = replace(base.cluster, **unit.cluster(copies), replicas=[])
    except ValueError as e:
        raise HarnessError(f"cluster: {e}") from None
    return replace(base, parallel=ParallelSettings(unit.prefill_tp, unit.prefill_pp), scheduler=dict(schedulers),
                   cluster=cluster)


def enumerate_units(base: ExperimentConfig, fits: list[tuple[int, int]], grid: Mapping[str, dict], policies: list[str],
                    most: int, limit: int) -> tuple[dict[Unit, ExperimentPlan], list[tuple[Unit, str, dict]], list[str]]:
    """Every unit of 1..`most` instances per role over the deployments that fit, up to `limit` GPUs,
    planned with the grid's schedulers of `policies`: (plans, (unit, scheduler, node) per candidate,
    why units were left out)."""
    mine = {name: node for name, node in grid.items() if node["policy"] in policies}
    plans, candidates, skipped = {}, [], []
    if not mine:
        return plans, candidates, [f"plan.pd_policies={policies}: no scheduler of the grid has these policies"]
    for ptp, ppp in fits:
        for dtp, dpp in fits:
            for p in range(1, most + 1):
                for d in range(1, most + 1):
                    unit = Unit(p, ptp, ppp, d, dtp, dpp)
                    if unit.gpus > limit:
                        continue
                    try:
                        plans[unit] = plan_experiment(unit_config(base, unit, mine))
                    except HarnessError as e:
                        skipped.append(f"{unit.layout}: {e}")
                        continue
                    candidates += [(unit, name, node) for name, node in mine.items()]
    return plans, candidates, skipped
