"""`python -m harness [overrides...]`: compose the Hydra config, run the experiment, save results.

Bad input (unknown experiment or scheduler, missing trace, invalid numbers) prints one line
naming the problem and exits with status 2, before anything is written.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from harness.capacity import CapacityResult, Probe
from harness.errors import HarnessError
from harness.experiment import ExperimentPlan, plan_experiment, search_capacity
from harness.results import RunWriter, provenance, records_frame, token_frame

CONFIG_DIR = Path(__file__).resolve().parent.parent / "experiments"
USAGE = """usage: python -m harness experiment=NAME [group=option ...] [key=value ...]

Runs a capacity search per scheduler in simulation and saves results/<name>/<timestamp>/.
Experiments: {experiments}
Examples:
  python -m harness experiment=yi34b_tp2_strict
  python -m harness experiment=mistral7b_relaxed scheduler=[sarathi,vllm] search.num_requests=512
"""


def compose(overrides: list[str]) -> DictConfig:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
            cfg = hydra_compose("config", overrides=overrides)
        OmegaConf.resolve(cfg)
        return cfg
    except MissingConfigException as e:
        raise HarnessError(_missing_config_line(e)) from None
    except (HydraException, OmegaConfBaseException) as e:
        raise HarnessError(str(e).strip().splitlines()[0]) from None


def _missing_config_line(e) -> str:
    first = str(e).strip().splitlines()[0].removeprefix("In 'config': ")
    options = getattr(e, "options", None)
    if options:
        return f"{first}; known: {', '.join(options)}"
    group = (getattr(e, "missing_cfg_file", "") or "").rpartition("/")[0]
    known = sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml")) if group else []
    return f"{first}; known: {', '.join(known)}" if known else first


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _probe_row(p: Probe) -> dict:
    o = p.detail
    s = o.summary
    return {
        "qps": p.qps,
        "passed": p.passed,
        "reason": o.verdict.reason,
        "tbt_quantile_s": o.verdict.tbt_s,
        "scheduling_delay_quantile_s": _finite(o.verdict.scheduling_delay_s),
        "ttft_p50_s": s.ttft.p50,
        "tbt_p50_s": s.tbt.p50,
        "tbt_p99_s": s.tbt.p99,
        "request_throughput": s.request_throughput,
        "num_completed": s.num_completed,
        "num_preemptions": s.num_preemptions,
    }


def run(cfg: DictConfig) -> Path:
    plan = plan_experiment(cfg)
    show = bool(cfg.get("progress", True))
    header = (
        f"{plan.name}: {plan.deployment.description}, {cfg.dataset.name} ({plan.search.num_requests} requests), "
        f"P{plan.slo.tbt_quantile * 100:g} TBT <= {plan.slo.tbt_s:g} s and "
        f"P{plan.slo.scheduling_delay_quantile * 100:g} scheduling delay <= {plan.slo.scheduling_delay_s:g} s"
    )
    print(header, flush=True)
    for note in plan.notes:
        print(f"note: {note}", flush=True)

    results: dict[str, CapacityResult] = {}
    request_frames, token_frames = [], []
    for name in plan.schedulers:
        results[name] = _search_with_progress(plan, name, show)
        for p in results[name].probes:
            request_frames.append(records_frame(p.detail.records, scheduler=name, qps=p.qps))
        cap = _capacity_probe(results[name])
        if cap is not None:
            token_frames.append(token_frame(cap.detail.records, scheduler=name, qps=cap.qps))

    summary = _summary(plan, cfg, results)
    writer = RunWriter(cfg.results_dir, plan.name)
    path = writer.write(
        OmegaConf.to_yaml(cfg),
        summary,
        pd.concat(request_frames, ignore_index=True),
        pd.concat(token_frames, ignore_index=True) if token_frames else token_frame([]),
    )
    _print_table(plan, results)
    print(f"results: {path}")
    return path


def _capacity_probe(result: CapacityResult) -> Probe | None:
    passing = [p for p in result.probes if p.passed and p.qps == result.capacity_qps]
    return passing[0] if passing else None


def _search_with_progress(plan: ExperimentPlan, name: str, show: bool) -> CapacityResult:
    # A bar on a terminal; one line per probe either way (logs of CI and nightly runs keep them).
    bar = tqdm(desc=f"{name:>12}", unit="probe", disable=not (show and sys.stderr.isatty()), leave=False, file=sys.stderr)

    def on_probe(p: Probe) -> None:
        bar.update(1)
        if show:
            v = p.detail.verdict
            bar.write(
                f"  {name:<16}{p.qps:>9.4g} QPS  {'pass' if p.passed else 'FAIL'}  P99 TBT {v.tbt_s:.3f} s, "
                f"median scheduling delay {v.scheduling_delay_s:.3f} s",
                file=sys.stderr,
            )

    try:
        return search_capacity(plan, name, on_probe=on_probe)
    finally:
        bar.close()


def _summary(plan: ExperimentPlan, cfg: DictConfig, results: dict[str, CapacityResult]) -> dict:
    w = plan.workload
    return {
        "experiment": plan.name,
        **provenance(),
        "seed": plan.seed,
        "backend": "sim",
        "deployment": plan.deployment.description,
        "kv_capacity_tokens": plan.deployment.kv_capacity_tokens,
        "notes": list(plan.notes),
        "slo": {
            "tbt_s": plan.slo.tbt_s,
            "tbt_quantile": plan.slo.tbt_quantile,
            "scheduling_delay_s": plan.slo.scheduling_delay_s,
            "scheduling_delay_quantile": plan.slo.scheduling_delay_quantile,
            "kind": cfg.slo.kind,
            "source": cfg.slo.source,
        },
        "workload": {
            "dataset": cfg.dataset.name,
            "source": w.source,
            "num_requests": int(len(w.prompt_lens)),
            "prompt_median": float(pd.Series(w.prompt_lens).median()),
            "output_median": float(pd.Series(w.output_lens).median()),
            "arrival": OmegaConf.to_container(cfg.arrival) if isinstance(cfg.arrival, DictConfig) else dict(cfg.arrival),
        },
        "schedulers": {
            name: {
                "config": OmegaConf.to_container(cfg.scheduler[name]),
                "capacity_qps": r.capacity_qps,
                "lowest_failing_qps": _finite(r.lowest_failing_qps),
                "saturated": r.saturated,
                "probes": [_probe_row(p) for p in r.probes],
            }
            for name, r in results.items()
        },
    }


def _print_table(plan: ExperimentPlan, results: dict[str, CapacityResult]) -> None:
    print(f"{'scheduler':<18}{'capacity (QPS)':>15}  {'bracket (pass, fail)':<22}{'probes':>7}  {'P99 TBT':>9}  {'median delay':>12}")
    for name, r in results.items():
        cap = _capacity_probe(r)
        hi = "none" if r.saturated else f"{r.lowest_failing_qps:.4g}"
        cap_str = f"{r.capacity_qps:.4g}" + ("+" if r.saturated else "")
        tbt = f"{cap.detail.verdict.tbt_s:.3f} s" if cap else "-"
        delay = f"{cap.detail.verdict.scheduling_delay_s:.3f} s" if cap else "-"
        print(f"{name:<18}{cap_str:>15}  {f'[{r.capacity_qps:.4g}, {hi})':<22}{len(r.probes):>7}  {tbt:>9}  {delay:>12}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        names = sorted(p.stem for p in (CONFIG_DIR / "experiment").glob("*.yaml"))
        print(USAGE.format(experiments=", ".join(names)))
        return 0
    try:
        run(compose(argv))
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: nothing saved for this run", file=sys.stderr)
        return 130
    return 0
