"""An offline throughput run (harness/search/offline.py): each scheduler's run, the printed table,
the saved run directory.

results/<experiment>/<timestamp>/
  config.yaml, summary.json   mode "offline"; per scheduler (key "offline") the metrics of
                              harness/throughput.py, and the gains over offline.baseline
  requests.parquet            one row per request per scheduler, with its pipeline-bubble seconds
  iterations.parquet          the iteration log per scheduler (backends that keep one)
The summary has no "schedulers" entry: capacity readers (harness.analysis.loader) pass these runs by.
"""
from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from common.errors import HarnessError
from harness.backends import open_backend
from harness.results.store import RunWriter, broken_reason, provenance
from harness.search.offline import OfflineOutcome, run_offline
from harness.experiment import ExperimentPlan
from harness.settings.experiment import ExperimentConfig
from harness.throughput import gains

ITERATIONS_FILE = "iterations.parquet"


def run_offline_experiment(config: ExperimentConfig, plan: ExperimentPlan, saved_config: str, gpus: int) -> Path:
    """`saved_config`: the config as saved (secrets redacted), `gpus`: the GPUs the run occupies
    (both as the capacity runs compute them, harness/commands/run.py)."""
    n, arrival = plan.search.num_requests, plan.arrival
    how = (f"closed loop, {arrival['concurrency']} requests in flight" if arrival.get("name") == "closed_loop"
           else "every request waiting at t=0")
    print(f"{plan.name}: {plan.deployment.description}, {plan.workload.source.split(';')[0]} ({n} requests), "
          f"offline throughput run ({how})", flush=True)
    writer = RunWriter(config.results_dir, plan.name)
    outcomes: list[OfflineOutcome] = []
    prov = provenance()
    try:
        for name in plan.schedulers:
            outcomes.append(run_offline(plan, name, open_backend, progress=config.progress))
            print(f"  {name:<16} done: {outcomes[-1].summary.token_throughput:.5g} tokens/s", file=sys.stderr, flush=True)
    except BaseException as e:
        if isinstance(e, HarnessError) and not outcomes:
            writer.discard()
            raise
        reason = broken_reason(e)
        writer.fail(reason, saved_config, {**offline_summary_json(plan, outcomes, prov, gpus),
                                                  "status": "broken", "reason": reason}, _frame(o.requests for o in outcomes))
        print(f"partial results (not a finished run): {writer.partial}", file=sys.stderr)
        raise
    logs = [o.iterations for o in outcomes if o.iterations is not None]
    if logs:
        pd.concat(logs, ignore_index=True).to_parquet(writer.partial / ITERATIONS_FILE, index=False)
    summary = offline_summary_json(plan, outcomes, prov, gpus)
    path = writer.write(saved_config, summary, _frame(o.requests for o in outcomes),
                        pd.DataFrame({"scheduler": [], "request_id": [], "token_times_s": []}))
    print_offline_table(summary)
    print(f"results: {path}")
    return path


def _frame(frames) -> pd.DataFrame | None:
    frames = list(frames)
    return pd.concat(frames, ignore_index=True) if frames else None


def offline_summary_json(plan: ExperimentPlan, outcomes: list[OfflineOutcome], prov: dict, gpus: int) -> dict:
    w = plan.workload
    summaries = {o.scheduler: o.summary for o in outcomes}
    baseline = plan.offline.baseline
    return {
        "experiment": plan.name, **prov, "seed": plan.seed, "backend": plan.backend.name, "mode": "offline",
        "deployment": plan.deployment.description, "num_gpus": gpus, "model": plan.deployment.model_name,
        "kv_capacity_tokens": plan.deployment.kv_capacity_tokens,
        "cluster": {"layout": plan.cluster.describe(plan.deployment.tp, plan.deployment.pp, plan.deployment.gpu)},
        "workload": {"dataset": plan.dataset["name"], "source": w.source, "num_requests": len(w),
                     "prompt_tokens": int(w.prompt_lens.sum()), "output_tokens": int(w.output_lens.sum()),
                     "arrival": plan.arrival},
        "baseline": baseline,
        "gains": gains(summaries, baseline),
        "offline": {name: {"config": plan.scheduler_knobs[name], **asdict(s)} for name, s in summaries.items()},
    }


def _fmt(v, spec: str, unit: str = "") -> str:
    return "-" if v is None else f"{v:{spec}}{unit}"


def print_offline_table(summary: dict) -> None:
    print(f"{summary['experiment']}: offline throughput per scheduler"
          + (f" (gains over {summary['baseline']})" if summary.get("baseline") else ""))
    print(f"{'scheduler':<16}{'done':>7}{'completion':>13}{'tokens/s':>11}{'gain':>8}{'iterations':>12}"
          f"{'hybrid':>8}{'decodes/hyb':>12}{'decode speedup':>16}{'bubble p50':>12}")
    for name, s in summary["offline"].items():
        gain = summary["gains"].get(name)
        print(f"{name:<16}{s['completed']:>7}{s['makespan_s']:>11.4g} s{s['token_throughput']:>11.5g}"
              f"{_fmt(gain, '>7.3f', 'x'):>8}{_fmt(s['iterations'], '>12d'):>12}{_fmt(s['hybrid_time_share'], '>7.1%'):>8}"
              f"{_fmt(s['decodes_per_hybrid'], '>12.3g'):>12}{_fmt(s['decode_speedup'], '>15.3g', 'x'):>16}"
              f"{_fmt(s['bubble_p50_s'], '>10.3g', ' s'):>12}")
