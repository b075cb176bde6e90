"""The fleet study's section of figures/REPORT.md (`section`) and its entry points in the Study
contract (harness/analysis/study.py): `load` (its own runs, from the report's source) and `parts`."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis import tables
from harness.analysis.figures import FigureOutcome
from harness.analysis.fleet.cells import INSTANCES, NUM_REQUESTS, OFFLOAD_GIB, ROUTERS, TIERS, WORKLOADS
from harness.analysis.fleet.figures import ROUTER_LABELS, WORKLOAD_LABELS
from harness.analysis.fleet.load import FleetResults, load_fleet
from harness.analysis.fleet.table import fleet_table, peak_rates, value
from harness.analysis.study import Part, Source

TITLE = "## Beyond the paper: a fleet of 8 replicas behind a router"
TIER_LABELS = {"gpu": "GPU only", "offload": f"+ {OFFLOAD_GIB:g} GiB host tier", "nocache": "prefix caching off"}


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if np.isfinite(a) and np.isfinite(b) and b > 0 else "—"


def table_markdown(table: pd.DataFrame) -> str:
    rows = [(WORKLOAD_LABELS.get(r.workload, r.workload), ROUTER_LABELS.get(r.router, r.router), TIER_LABELS.get(r.tier, r.tier),
             r.scheduler, tables.num(r.capacity_qps) + (" !" if r.starved else ""), tables.num(r.hit_rate, ".0%"),
             tables.num(r.preemptions, ".0f"), tables.num(r.gpu_hours, ".0f")) for r in table.itertuples()]
    return tables.markdown(rows, ("workload", "router", "KV", "scheduler", "capacity (QPS)", "hit rate at capacity",
                                  "preemptions at capacity", "GPU-hours a day"))


def answers(table: pd.DataFrame) -> list[str]:
    """The study's questions answered from its table, each difference beside the variant that shows it."""
    out = ["**Does chunked prefill still pay when the router wins the cache?** Sarathi-Serve's capacity over vLLM's, "
           "per router (the same fleet, the same requests):", ""]
    for w in WORKLOADS:
        for tier in TIERS:
            parts = [f"{ROUTER_LABELS[r]} {_ratio(value(table, w, r, tier, 'sarathi'), value(table, w, r, tier, 'vllm'))} "
                     f"(hit rate {tables.num(value(table, w, r, tier, 'sarathi', 'hit_rate'), '.0%')})" for r in ROUTERS]
            out.append(f"- {WORKLOAD_LABELS[w]}, {TIER_LABELS[tier]}: " + "; ".join(parts) + ".")
        off = _ratio(value(table, w, "least_outstanding", "nocache", "sarathi"), value(table, w, "least_outstanding", "nocache", "vllm"))
        out.append(f"  With prefix caching off (nothing to win): {off}.")
    out += ["", "**What the router wins** (Sarathi-Serve, GPU only; the switched-off variant is the fleet without a "
            "prefix cache, where every router sends the same work):", ""]
    for w in WORKLOADS:
        base = value(table, w, "least_outstanding", "nocache", "sarathi")
        parts = [f"{ROUTER_LABELS[r]} {_ratio(value(table, w, r, 'gpu', 'sarathi'), base)}" for r in ROUTERS]
        out.append(f"- {WORKLOAD_LABELS[w]}: capacity over the cache-off fleet: " + "; ".join(parts) + ".")
    out += ["", "**Where does the host tier pay for its transfers?** Capacity with the tier over without, and the hit "
            "rate it adds (blocks found in host memory load over PCIe instead of being prefilled again):", ""]
    for w in WORKLOADS:
        for p in ("sarathi", "vllm"):
            parts = []
            for r in ROUTERS:
                on, gpu = value(table, w, r, "offload", p), value(table, w, r, "gpu", p)
                dh = value(table, w, r, "offload", p, "hit_rate") - value(table, w, r, "gpu", p, "hit_rate")
                parts.append(f"{ROUTER_LABELS[r]} {_ratio(on, gpu)} ({'+' if dh >= 0 else ''}{tables.num(100 * dh, '.0f')} points)")
            out.append(f"- {WORKLOAD_LABELS[w]}, {p}: " + "; ".join(parts) + ".")
    return out


def section(results: FleetResults, outcomes: tuple[FigureOutcome, ...], figures_dir: Path) -> list[str]:
    table = fleet_table(results.rows)
    lines = [TITLE, ""]
    if table.empty:
        return lines + ["_No fleet study runs (harness/analysis/fleet/cells.py; `python -m harness figure=all` runs them)._", ""]
    peaks = peak_rates(table)
    lines += [f"Qwen3-32B, {INSTANCES} replicas of one H100-80G each (experiments/experiment/fleet_qwen3_32b_h100.yaml), "
              f"prefix caching on, the strict TBT SLO derived for the deployment ({tables.num(float(table['slo_tbt_s'].iloc[0]))} s), "
              f"{', '.join(f'{n:,} {w} requests' for w, n in NUM_REQUESTS.items())} per probe (docs/fleet.md). "
              "Capacity is the paper's criterion over the whole fleet. GPU-hours a day: each hour of the diurnal curve "
              "holds ceil(its highest rate / (fleet capacity / 8)) replicas, at one GPU each (harness/analysis/fleet/day.py); "
              "the day's peak is today's fleet's capacity (load only, Sarathi-Serve, GPU only): "
              + ", ".join(f"{w} {tables.num(v)} QPS" for w, v in peaks.items()) + ". A capacity marked ! looks starved.", ""]
    for o in outcomes:
        lines += tables.figure_lines(o, figures_dir)
    lines += [table_markdown(table), "", *answers(table), ""]
    if not results.left_out.empty:
        lines += [f"{len(results.left_out)} fleet run(s) left out, not at their cell's settings:", "",
                  tables.left_out_markdown(results.left_out, ("experiment", "run", "why")), ""]
    return lines


def load(source: Source) -> FleetResults:
    """The Study's `load`: its runs in the results directory, cells missing there from the reference runs."""
    return load_fleet(source.results_dir, source.reference_dir)


def parts(results: FleetResults, outcomes: tuple[FigureOutcome, ...], source: Source) -> tuple[Part, ...]:
    """The Study's `parts`: its section at the report's end, after the first Sarathi paper's. With
    no run and no figure drawn or skipped (the tables-only report, results/reference/REPORT.md),
    nothing: that report stays as it was before the study."""
    if fleet_table(results.rows).empty and not outcomes:
        return ()
    return (Part(tuple(section(results, outcomes, source.figures_dir))),)
