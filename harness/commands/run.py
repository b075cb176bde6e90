"""Run one experiment config: a capacity search (or one fixed-rate probe) per scheduler and seed,
resumable through the probe cache; print the table; save the run directory."""
from __future__ import annotations

import math
import statistics
import sys
from contextlib import nullcontext
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from common.errors import HarnessError
from harness.backends import backend_class, fit_config, open_backend
from harness.commands.cache_report import cache_fields, print_cache_lines
from harness.config.experiment import experiment_config
from harness.commands.offline import ITERATIONS_FILE
from harness.commands.scaling_report import print_scaling_tables
from harness.commands.table import disturbed_probes, print_table, shown_probe, starved
from harness.results.schema import ProbeRow
from harness.results.store import RunWriter, broken_reason, broken_runs, provenance, token_frame
from harness.search.cache import ProbeCache, cache_key, code_version
from harness.search.capacity import CapacityResult, Probe
from harness.search.executor import LocalProcessPool, ProbeExecutor, open_executor, searches_at_once
from harness.experiment import ExperimentPlan, check_cluster_backend, plan_experiment, reseed
from harness.search.probe import SearchBroken, probe_requests, search_capacity
from harness.search.rounds import Round
from harness.starvation import BOUNDS as STARVATION_BOUNDS
from harness.validate.bands import band, calibration_entry, capacity_bands


@dataclass(frozen=True)
class SchedulerRun:
    scheduler: str
    seed: int
    result: CapacityResult
    broken: str | None = None  # the run broke during this search: `result` holds the probes finished before


def run_experiment(cfg: DictConfig, one_of_many: bool = False) -> Path:
    """`one_of_many`: a job of a multirun, figure=all or nightly (searches_at_once)."""
    config = experiment_config(cfg)
    check_cluster_backend(config)  # a config no backend can run is refused before an endpoint is asked
    changed, fitted = fit_config(config)  # backend=endpoint: the server's model and max_model_len, asked before planning
    for key, value in changed.items():  # saved as fitted (config.yaml), and typed again
        OmegaConf.update(cfg, key, value)
    plan = plan_experiment(experiment_config(cfg) if changed else config)
    plan = replace(plan, notes=(*plan.notes, *fitted))
    if plan.offline is not None:  # a rate-free arrival: one throughput run per scheduler, no search
        from harness.commands.offline import run_offline_experiment

        return run_offline_experiment(config, plan, _saved_config(cfg), num_gpus(plan))
    show = config.progress
    s = plan.search
    what = f"one probe at {s.fixed_qps:g} QPS" if s.fixed_qps else "capacity search"
    parallel = s.workers > 1 and not s.fixed_qps
    if parallel:
        what += f" ({s.workers} probes at once per round{' on Ray' if s.executor == 'ray' else ''})"
    layout = plan.cluster.describe(plan.deployment.tp, plan.deployment.pp, plan.deployment.gpu)
    where = plan.deployment.description + (f", {layout}" if layout else "")
    print(
        f"{plan.name}: {where}, {plan.dataset['name']} ({s.num_requests} requests), {what}; {plan.slo.describe()}",
        flush=True,
    )
    for note in plan.notes:
        print(f"note: {note}", flush=True)
    where = getattr(plan.backend, "base_url", None)
    if where:
        print(f"backend {plan.backend.name}: the server at {where}, {', '.join(plan.schedulers)} (the deployment "
              f"above prices the SLO and the prompts' vocabulary only)", flush=True)
    if cls := vllm_scheduler_cls(plan):
        print(f"backend live: vllm serve with scheduler class {cls}", flush=True)
    prov = provenance()
    backend = backend_class(plan.backend.name)
    if not backend.deterministic:  # a measurement: say what it will cost and how the client runs
        from harness.backends.live.client import describe_client

        print(plan.describe_probes(), flush=True)
        print(describe_client(plan.backend), flush=True)
    cache = None
    if config.cache and backend.deterministic:  # measurements (live probes) are never cached
        # A re-measured profile at the same path must not reuse stale probes: its digest is in the key.
        profile = getattr(plan.deployment.perf, "profile", None)
        # A re-fitted calibration at the same path must not either: its factors are in the key.
        cal = plan.deployment.calibration
        key = cache_key(OmegaConf.to_container(cfg), code_version(prov, (profile.digest if profile else "")
                                                                   + (str(sorted(cal.factors.items())) if cal else "")))
        cache = ProbeCache(Path(config.results_dir) / plan.name / ".probes" / key)

    for where, reason in broken_runs(config.results_dir, plan.name)[:1]:
        print(f"note: an earlier run of {plan.name} broke ({reason.splitlines()[0]}); its partial results: {where}",
              flush=True)

    # One pool of workers for every search of the run: a local pool starts on the first round, Ray
    # connects now (an unreachable cluster is bad input, before anything is written).
    with open_executor(s) if parallel else nullcontext() as pool:
        return _claim_and_run(cfg, plan, show, cache, prov, pool, one_of_many)


def _claim_and_run(cfg: DictConfig, plan: ExperimentPlan, show: bool, cache: ProbeCache | None, prov: dict,
                   pool: ProbeExecutor | None, one_of_many: bool) -> Path:
    s = plan.search
    parallel = pool is not None
    writer = RunWriter(cfg.results_dir, plan.name)  # claims the run's directory (kept partial until done)
    runs: list[SchedulerRun] = []
    token_frames = []
    iterations: list[pd.DataFrame] = []
    try:
        _run_all(plan, show, cache, pool, runs, token_frames, one_of_many, iterations)
        tokens = pd.concat(token_frames, ignore_index=True) if token_frames else token_frame([])
        path = writer.write(_saved_config(cfg), _summary(plan, runs, prov), _requests(runs), tokens)
        if iterations:  # the vLLM plugin's trace of every scheduler's server (harness/backends/live/iterations.py)
            pd.concat(iterations, ignore_index=True).to_parquet(path / ITERATIONS_FILE, index=False)
    except BaseException as e:  # whatever stopped it, the claimed directory must say so
        if isinstance(e, HarnessError) and not runs:
            writer.discard()  # bad input a backend found before anything was measured: leave nothing
            raise
        reason = broken_reason(e)
        summary = {**_summary(plan, runs, prov), "status": "broken", "reason": reason}
        unsaved = writer.fail(reason, _saved_config(cfg), summary, _requests(runs))
        print(f"partial results (not a finished run): {writer.partial}" + (f" (not saved: {unsaved})" if unsaved else ""),
              file=sys.stderr)
        raise

    print(f"{plan.name}: {'one probe per scheduler' if s.fixed_qps else 'capacity per scheduler'}")
    print_table(runs, fixed=bool(s.fixed_qps), gpus=num_gpus(plan))
    print_cache_lines(runs, plan, lambda res: shown_probe(res, fixed=bool(s.fixed_qps)))
    print_scaling_tables(runs, lambda res: shown_probe(res, fixed=bool(s.fixed_qps)))
    if not s.fixed_qps:
        print(capacity_bands(plan.deployment.calibration, {r.scheduler: r.result.capacity_qps for r in runs}))
    if parallel:
        print(f"rounds of up to {s.workers} probes at once: "
              + ", ".join(f"{r.scheduler} {r.result.rounds} ({len(r.result.probes)} probes)" for r in runs))
    print(f"results: {path}")
    return path


def vllm_scheduler_cls(plan: ExperimentPlan) -> str | None:
    """The scheduler class a live vLLM server of the run runs (None: not a live vLLM run)."""
    if plan.backend.name != "live":
        return None
    from harness.backends.live import scheduler_class  # the live backend's code only where a live run is

    return scheduler_class(plan.backend.server, plan.backend.vllm_scheduler)


def _run_all(plan: ExperimentPlan, show: bool, cache: ProbeCache | None, pool: ProbeExecutor | None,
             runs: list[SchedulerRun], token_frames: list, one_of_many: bool, iterations: list) -> None:
    """Every scheduler's search, seed by seed, appended to `runs` in that order (with what
    finished when another broke). Simulated searches of probes big enough to pay for a process
    run at once, one per CPU (`search.searches_at_once`): each gives what it gives alone."""
    jobs = [(plan if r == 0 else reseed(plan, plan.seed + r), name) for r in range(plan.search.repeats)
            for name in plan.schedulers]
    at_once = searches_at_once(plan.search, backend_class(plan.backend.name).deterministic, len(jobs), pool, one_of_many)
    done: dict[int, tuple[SchedulerRun, object]] = {}
    try:
        if at_once > 1:
            with LocalProcessPool(at_once) as searches:
                for i, out in searches.map_unordered(_search_job, [(p, name, show, cache, None) for p, name in jobs]):
                    done[i] = out
        else:
            for i, (p, name) in enumerate(jobs):
                try:
                    done[i] = _search_job((p, name, show, cache, pool))
                except SearchBroken as e:  # what it had measured is kept, marked, with no capacity
                    if e.probes:
                        done[i] = (SchedulerRun(name, p.seed, CapacityResult(0.0, math.inf, e.probes), str(e)), None, None)
                    raise
    finally:
        for i in sorted(done):
            run, frame, trace = done[i]
            runs.append(run)
            if frame is not None:
                token_frames.append(frame)
            if trace is not None:
                iterations.append(trace)


def _search_job(job) -> tuple[SchedulerRun, object, object]:
    """One scheduler's search (a process of its own when searches run at once): the run, the
    token-time frame of its capacity probe (other probes' token times stay behind: large, unused)
    and the server's iteration trace where the backend keeps one (live vLLM with the plugin)."""
    plan, name, show, cache, pool = job
    s = plan.search
    with open_backend(plan.job(name, progress=show)) as serving:
        result = _run_scheduler(plan, name, show, cache, serving.run, pool)
        shown = shown_probe(result, fixed=bool(s.fixed_qps))
        records = shown.detail.records if shown is not None else None
        if shown is not None and records is None:
            # Cached probes carry no token times; the backend is deterministic (only
            # then is there a cache), so running the probe again gives the same records.
            label = f"{name} @ {shown.qps:.3g} QPS"
            records = serving.run(probe_requests(plan, shown.qps), label).records
        trace = getattr(serving, "iteration_trace", None)  # optional: backends that keep one
        iterations = trace() if trace is not None else None
    frame = token_frame(records, scheduler=name, seed=plan.seed, qps=shown.qps) if shown is not None else None
    probes = tuple(replace(p, detail=replace(p.detail, records=None)) for p in result.probes)
    return SchedulerRun(name, plan.seed, replace(result, probes=probes)), frame, iterations


def _saved_config(cfg: DictConfig) -> str:
    """The resolved config as saved with the run: secrets (an API key) never reach the disk."""
    saved = OmegaConf.to_container(cfg)
    if (saved.get("backend") or {}).get("api_key"):
        saved["backend"]["api_key"] = "<redacted>"
    return OmegaConf.to_yaml(saved)


def _requests(runs: list[SchedulerRun]) -> pd.DataFrame | None:
    frames = [p.detail.requests for run in runs for p in run.result.probes]
    return pd.concat(frames, ignore_index=True) if frames else None


def _run_scheduler(plan: ExperimentPlan, name: str, show: bool, cache: ProbeCache | None, run,
                   pool: ProbeExecutor | None = None) -> CapacityResult:
    # A bar on a terminal (probes so far, the bracket the capacity lies in); one line per probe
    # either way (logs of CI and nightly runs keep them); a parallel search also prints one line
    # per round (its rates, the bracket so far), then its probes' lines as they finish.
    bar = tqdm(desc=f"{name:>12}", unit="probe", disable=not (show and sys.stderr.isatty()), leave=False, file=sys.stderr)
    passed, failed = [0.0], [math.inf]

    def on_probe(p: Probe) -> None:
        if p.passed:
            passed[0] = max(passed[0], p.qps)
        else:
            failed[0] = min(failed[0], p.qps)
        bar.set_postfix_str(f"capacity in [{passed[0]:.4g}, {failed[0]:.4g}) QPS", refresh=False)
        bar.update(1)
        if show:
            v = p.detail.verdict
            cached = " (cached)" if p.detail.records is None else ""
            errors = f", {v.num_errors} FAILED REQUESTS ({v.reason})" if v.num_errors else ""
            judged = (f"attainment {v.goodput_fraction:.1%}, " if plan.slo.criterion == "attainment" else "")
            signs = starved(p)
            flag = f", looks starved: {signs}" if signs else ""
            bar.write(
                f"  {name:<16} seed {plan.seed}{p.qps:>10.4g} QPS  {'pass' if p.passed else 'FAIL'}  {judged}"
                f"P99 TBT {v.tbt_s:.3f} s, median scheduling delay {v.scheduling_delay_s:.3f} s{errors}{flag}{cached}",
                file=sys.stderr,
            )

    def on_round(r: Round) -> None:
        bar.set_description_str(f"{name:>12} round {r.index}", refresh=False)
        if show:
            lo, hi = r.bracket
            known = f" (capacity in [{lo:.4g}, {hi:.4g}) QPS)" if r.index > 1 else ""
            bar.write(f"  {name:<16} seed {plan.seed}  round {r.index}{known}: {len(r.rates)} probes at "
                      f"{', '.join(f'{q:.4g}' for q in sorted(r.rates))} QPS", file=sys.stderr)

    try:
        return search_capacity(plan, name, run, on_probe=on_probe, cache=cache, executor=pool, on_round=on_round)
    finally:
        bar.close()


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def num_gpus(plan: ExperimentPlan) -> int:
    """The GPUs the deployment occupies: TP x PP x DP per instance (DeploymentPlan.gpus, what the
    launcher starts), times the cluster's instances; harness.analysis.loader counts the same for a
    run saved without it. DP ranks (parallel.dp, EP MoE) run as one engine's ranks, never beside a
    cluster (harness.backends.sim refuses both), so the cluster's count times dp is every GPU."""
    return plan.cluster.num_gpus(plan.deployment.tp, plan.deployment.pp) * plan.deployment.dp


def _probe_row(p: Probe, gpus: int, block_size: int) -> dict:
    o = p.detail
    s = o.summary
    row = asdict(ProbeRow(
        **cache_fields(o.requests, block_size), qps=p.qps, passed=p.passed, reason=o.verdict.reason,
        tbt_quantile_s=o.verdict.tbt_s, scheduling_delay_quantile_s=_finite(o.verdict.scheduling_delay_s),
        ttft_p50_s=s.ttft.p50, ttft_p99_s=s.ttft.p99, tbt_p50_s=s.tbt.p50, tbt_p99_s=s.tbt.p99, e2e_p50_s=s.e2e.p50,
        request_throughput=s.request_throughput, goodput=o.verdict.goodput, goodput_fraction=o.verdict.goodput_fraction,
        goodput_per_gpu=o.verdict.goodput / gpus, output_token_throughput=s.output_token_throughput,
        num_completed=s.num_completed, num_preemptions=s.num_preemptions, num_errors=o.verdict.num_errors,
        errors=dict(o.verdict.errors), starvation=starved(p),
    ))
    if o.scaling is not None:  # an autoscaled fleet (cluster.autoscale): its windows, replicas and decisions
        row["autoscale"] = o.scaling
    return row


def _capacity_fields(result: CapacityResult, gpus: int, block_size: int) -> dict:
    fields = {
        "capacity_qps": result.capacity_qps, "lowest_failing_qps": _finite(result.lowest_failing_qps),
        "saturated": result.saturated, "rounds": result.rounds,
        "probes": [_probe_row(p, gpus, block_size) for p in result.probes],
    }
    if disturbed := disturbed_probes(result):  # the result measures the host (table.py warns it too)
        fields["disturbed_probes_qps"] = [p.qps for p in disturbed]
    return fields


def _summary(plan: ExperimentPlan, runs: list[SchedulerRun], prov: dict) -> dict:
    w = plan.workload
    gpus, bs = num_gpus(plan), plan.deployment.block_size
    schedulers = {}
    for name in plan.schedulers:
        mine = [r for r in runs if r.scheduler == name and not r.broken]
        broken = [{"reason": r.broken, "seed": r.seed, "probes": [_probe_row(p, gpus, bs) for p in r.result.probes],
                   "note": "probes finished before the run broke: measured, but no capacity"}
                  for r in runs if r.scheduler == name and r.broken]
        if not mine:  # a run that broke before this scheduler finished (its finished probes, marked)
            if broken:
                schedulers[name] = {"config": plan.scheduler_knobs[name], "broken": broken[0]}
            continue
        entry = {"config": plan.scheduler_knobs[name], **_capacity_fields(mine[0].result, gpus, bs)}
        if len(mine) > 1:
            caps = [r.result.capacity_qps for r in mine]
            entry["repeats"] = {
                "seeds": [r.seed for r in mine], "capacities_qps": caps, "mean_qps": statistics.fmean(caps),
                "std_qps": statistics.stdev(caps),
                "runs": [{"seed": r.seed, **_capacity_fields(r.result, gpus, bs)} for r in mine[1:]],
            }
        if broken:
            entry["broken"] = broken[0]
        entry["capacity_band_qps"] = band(plan.deployment.calibration, entry.get("capacity_qps"))
        schedulers[name] = entry
    return {
        "experiment": plan.name, **prov, "seed": plan.seed, "backend": plan.backend.name,
        **({"vllm_scheduler_cls": cls} if (cls := vllm_scheduler_cls(plan)) else {}),
        "mode": "fixed_rate" if plan.search.fixed_qps else "capacity", "deployment": plan.deployment.description,
        "calibration": calibration_entry(plan.deployment.calibration),
        "cluster": {**asdict(plan.cluster), "layout": plan.cluster.describe(plan.deployment.tp, plan.deployment.pp, plan.deployment.gpu)},
        "num_gpus": gpus, "model": plan.deployment.model_name, "kv_capacity_tokens": plan.deployment.kv_capacity_tokens,
        "notes": list(plan.notes) + [f"{r.scheduler} at {p.qps:.4g} QPS: {note}"
                                     for r in runs for p in r.result.probes for note in p.detail.notes],
        "starvation_bounds": dict(STARVATION_BOUNDS),  # what flags a passing probe's `starvation` (harness.starvation)
        "slo": {**asdict(plan.slo), "kind": plan.slo_kind, "source": plan.slo_source},
        "workload": {
            "dataset": plan.dataset["name"], "source": w.source, "num_requests": int(len(w.prompt_lens)),
            "prompt_median": float(pd.Series(w.prompt_lens).median()),
            "output_median": float(pd.Series(w.output_lens).median()), "arrival": plan.arrival,
        },
        "schedulers": schedulers,
    }
