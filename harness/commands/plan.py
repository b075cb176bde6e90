"""`python -m harness plan model=M hardware=H dataset=D slo.tbt_s=S target_qps=L [plan.KEY=VALUE ...]`:
the deployment planner (harness.planner). Prints the ranked table and the winner's `vllm serve` line
and preset; saves results_dir/plans/<name>/<timestamp>/ (plan.json, table.md, pareto.png,
serve.sh, experiment/<name>.yaml). Bad input, and a request nothing meets, is one line and exit
status 2 with nothing written."""
from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

from common.errors import HarnessError, RunBroken
from harness.results.store import broken_reason
from harness.config import compose, experiment_config
from harness.planner import answer, export, figure
from harness.planner.check import check_winner
from harness.planner.replicas import POISSON_NOTE
from harness.planner.search import PlanRun, run_plan
from harness.planner.settings import plan_settings, split_words
from harness.planner.space import enumerate_space
from harness.validate.bands import band, calibration_entry, capacity_bands
from harness.results.claim import discard, finish, make_room, record_failure, unwritable, why

USAGE = """usage: python -m harness plan model=M hardware=H dataset=D slo.tbt_s=S target_qps=L [plan.KEY=VALUE ...]

Every deployment that fits (TP x PP over the hardware's nodes), crossed with each policy's declared sweep
(register_policy(plan=...): Sarathi-Serve token budgets, vLLM and Orca batch sizes; plan.grid.POLICY.KNOB=[...]
sets its values, [] plans none of it); each one's capacity in the simulator; the replicas the target needs; ranked.
plan.* keys (harness/planner/settings.py PlanSettings): max_gpus, max_total_gpus, tp, pp, grid.POLICY.KNOB,
screen_requests, refine_top, rows, prune, margin, workers, prices.GPU, out, disaggregated (P/D units too), pd_max, pd_policies, check (the winner's replicas
simulated behind least_outstanding at the target). Any experiment key works too (search.num_requests, slo.kind, perf.stack ...).
Example:
  python -m harness plan model=llama3-70b hardware=h100_80g dataset=openchat_sharegpt4 slo.tbt_s=0.1 target_qps=40
"""


def plan_command(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(USAGE)
        return 0
    mine, overrides = split_words(argv)
    settings = plan_settings(mine)
    if settings.out and Path(settings.out).exists() and any(Path(settings.out).iterdir()):
        raise HarnessError(f"plan.out={settings.out} is not empty (an earlier plan?): remove it or name another "
                           f"directory; nothing was run")
    cfg = experiment_config(compose(overrides))
    t0 = time.perf_counter()
    space = enumerate_space(cfg, settings)
    plan0 = next(iter(space.plans.values()))
    name = cfg.name if cfg.name != "custom" else f"{plan0.deployment.model_name}_{plan0.deployment.gpu}"
    target = f"target {settings.target_qps:g} QPS" if settings.target_qps else "no target (capacity per GPU)"
    print(f"plan {name}: {plan0.deployment.model_name} on {plan0.deployment.gpu} ({space.gpus_per_node} a node, "
          f"replicas of up to {space.max_gpus} GPUs), {plan0.dataset['name']}, {plan0.slo.describe()}, {target}: "
          f"{len(space.plans)} deployments fit"
          + (f" ({', '.join(f'tp{m.tp}pp{m.pp}' + (f'dp{m.dp}ep' if m.dp > 1 else '') for m in space.misfits)} do not)" if space.misfits else "")
          + (f", {len(space.unit_plans)} P/D units" if settings.disaggregated else "")
          + (f" ({len(space.unit_misfits)} left out, below)" if space.unit_misfits else "")
          + f", {len(space.candidates)} configurations", flush=True)
    for why_not in space.unit_misfits:  # a unit the user asked for that the plan will not weigh: why
        print(f"  P/D unit left out: {why_not}", flush=True)
    out = Path(settings.out) if settings.out else Path(cfg.results_dir) / "plans" / name / datetime.now().strftime("%Y%m%d-%H%M%S")
    partial = _claim(out, "plan.out" if settings.out else "results_dir")  # a place it cannot write: exit 2 now, not after the search
    try:
        _plan(space, settings, cfg, name, out, partial, t0)
    except HarnessError:  # nothing meets the request: one line, exit 2, nothing written
        discard(partial)
        raise
    except BaseException as e:  # whatever stopped it, the claimed directory says so
        e_disk = record_failure(partial, broken_reason(e))
        print(f"partial plan (not a finished plan): {partial}" + (f" (no reason saved: {why(e_disk)})" if e_disk else ""),
              file=sys.stderr)
        raise
    print(f"plan: {out}")
    return 0


def _claim(out: Path, what: str) -> Path:
    partial = out.with_name(f".{out.name}.partial")
    try:
        partial.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise HarnessError(f"{what}: {unwritable(Path(e.filename or partial), e)}") from None
    make_room(partial, what)
    return partial


def _plan(space, settings, cfg, name: str, out: Path, partial: Path, t0: float) -> None:
    plan0 = next(iter(space.plans.values()))
    run = run_plan(space, settings)
    win = answer.winner(run)  # nothing meets the request: HarnessError
    elapsed = time.perf_counter() - t0
    table = answer.rows(run, settings.rows)
    wplan = space.plan_of(win.candidate)
    counts = {s: sum(e.status == s for e in run.evaluations) for s in ("pruned", "eliminated", "screened", "refined")}
    print(f"{len(run.evaluations)} configurations in {elapsed:.1f} s ({len(run.evaluations) / elapsed:.1f} a second): "
          f"{counts['pruned']} ruled out by their bounds, {counts['eliminated']} by one probe at the rate they needed, "
          f"{counts['screened'] + counts['refined']} screened ({run.probes_screen} probes of {run.screen_requests} "
          f"requests), {counts['refined']} refined ({run.probes_full} probes of {plan0.search.num_requests})")
    for line in answer.table_lines(table) + answer.starved_lines(table):
        print(line)
    print(f"note: {POISSON_NOTE}; latencies at a replica's share of the target")
    log = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    checks = check_winner(space, win, settings.target_qps, log) if settings.target_qps and settings.check else []
    for c in checks:
        print(c.line(wplan.slo.criterion))
    if checks and not checks[0].passed:
        print(f"WARNING: {checks[0].replicas} replicas of the winner FAIL the SLO at the target in the cluster simulation: "
              f"the answer is not trustworthy as it stands"
              + (f"; {checks[-1].replicas} replicas pass" if checks[-1].passed else f"; {checks[-1].replicas} fail too"))
    preset_name = f"plan_{name}".replace("-", "_").replace(".", "_")
    serve = export.vllm_serve_line(wplan, win.candidate.scheduler)
    share = settings.target_qps / table[0].replicas if settings.target_qps and table[0].replicas else None
    check = (f"python -m harness hydra.searchpath=[file://{out.resolve()}] experiment={preset_name} backend=endpoint "
             f"backend.base_url=http://HOST:PORT/v1 backend.served_model=NAME")
    if win.candidate.unit is not None:  # backend=endpoint measures one server; the unit's cluster runs simulated or live
        check = f"python -m harness hydra.searchpath=[file://{out.resolve()}] experiment={preset_name} (the unit simulated; backend=live runs it as in-repo servers)"
    print(f"winner: {win.candidate.key}, {answer.describe_deployment(win.candidate.tp, win.candidate.pp, win.candidate.unit, win.candidate.dp)}, "
          f"{answer.describe_scheduler(win, wplan)}: {win.capacity_qps:.3g} QPS a replica")
    print(capacity_bands(wplan.deployment.calibration, {win.candidate.key: win.capacity_qps}))
    print(serve)
    print(f"check it{'' if win.candidate.unit else ' live'}: {check}" + (f" (one replica at its share: search.fixed_qps={share:.3g})" if share else ""))
    try:
        _write(partial, run, cfg, win, table, preset_name, serve, check, elapsed, name, checks)
    except OSError as e:
        raise RunBroken(f"saving the plan: {unwritable(Path(e.filename or partial), e)}") from None
    finish(partial, out, "saving the plan")


def _write(partial: Path, run: PlanRun, cfg, win, table, preset_name: str, serve: str, check: str, elapsed: float,
           name: str, checks) -> None:
    (partial / "experiment").mkdir(exist_ok=True)
    wplan = run.space.plan_of(win.candidate)
    comment = (f"The winner of `python -m harness plan` ({name}): {win.candidate.key}, {win.capacity_qps:.4g} QPS a replica.\n"
               f"Check it live: {check}")
    (partial / "experiment" / f"{preset_name}.yaml").write_text(
        export.preset_yaml(cfg, wplan, win.candidate.scheduler, preset_name, comment))
    (partial / "serve.sh").write_text("#!/bin/sh\n" + serve + "\n")
    checked = "".join(f"{c.line(wplan.slo.criterion)}\n" for c in checks)
    (partial / "table.md").write_text(answer.table_markdown(table) + f"\n{POISSON_NOTE}\n" + (f"\n{checked}" if checked else "")
                                       + "".join(f"\n{line}" for line in answer.starved_lines(table)))
    figure.draw(run, win, partial / "pareto.png", f"{name}: {wplan.slo.describe()}")
    record = {
        "name": name, "seconds": elapsed, "settings": asdict(run.settings), "winner": win.candidate.key,
        "calibration": calibration_entry(wplan.deployment.calibration),
        "winner_band_qps": band(wplan.deployment.calibration, win.capacity_qps),
        "probes_screen": run.probes_screen, "probes_full": run.probes_full, "waves": run.waves,
        "misfits": [asdict(m) for m in run.space.misfits], "unit_misfits": list(run.space.unit_misfits), "table": [asdict(r) for r in table],
        "candidates": [{"key": e.candidate.key, "status": e.status, "bound_qps": e.bound.qps, "bound": e.bound.binding,
                        "needed_qps": e.needed_qps, "warm_from": e.warm_from,
                        **{stage: asdict(a) if a is not None else None
                           for stage, a in (("screen", e.screen), ("full", e.full), ("at_target", e.at_target))}}
                       for e in run.evaluations],
        "checked": [{"replicas": c.replicas, "gpus": c.gpus, "qps": c.qps, "requests": c.requests,
                     "verdict": "pass" if c.passed else "fail", "probe": asdict(c.probe)} for c in checks],
    }
    (partial / "plan.json").write_text(json.dumps(_clean(record), indent=1))


def _clean(x):
    """Plain JSON: non-finite floats (no bound, never failed) as null."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


if __name__ == "__main__":
    sys.exit(plan_command(sys.argv[1:]))
