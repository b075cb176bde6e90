"""`python -m harness nightly [results_dir=results/nightly] [reference=results/reference]
[out=figures/DRIFT.md] [capacity_rel=0.05] [latency_rel=0.10] [n_jobs=2] [launcher=joblib] [hydra.launcher.KEY=VALUE ...]`

Re-runs every reference run's saved config into results_dir, compares (harness.analysis.drift),
writes the drift report, exits 1 on drift (2 on bad input). The runs go through `launcher`, as
for `figure=all` (harness.commands.figure), the longest first (`run_order`): two jobs run at once,
and a run that ends on a long job leaves the other core idle for its rest, where short ones fill
both cores to the end.
"""
from __future__ import annotations

import json
from pathlib import Path

import yaml
from omegaconf import OmegaConf

from common.errors import HarnessError
from harness.overrides import options as parse_options


def nightly_command(argv: list[str]) -> int:
    from harness.analysis.drift import Tolerances, run_nightly
    from harness.commands.figure import launcher_words
    from harness.commands.jobs import launcher_params, run_configs

    argv, launcher_overrides = launcher_words(argv)
    opts = parse_options(argv, {"results_dir": "results/nightly", "reference": "results/reference", "out": "figures/DRIFT.md",
                           "capacity_rel": Tolerances.capacity_rel, "latency_rel": Tolerances.latency_rel, "n_jobs": 2,
                           "launcher": "joblib"})
    launcher_params(opts["launcher"], launcher_overrides)  # bad input before reading the reference
    ref = Path(opts["reference"])
    saved = run_order(ref)
    if not saved:
        raise HarnessError(f"no reference runs under {ref} (expected {ref}/<experiment>/<run>/config.yaml)")
    configs = []
    for path in saved:
        cfg = OmegaConf.load(path)
        cfg.results_dir = opts["results_dir"]
        cfg.progress = False
        configs.append(cfg)
    run_configs(configs, n_jobs=opts["n_jobs"], only_missing=False,  # today's numbers, never yesterday's
                launcher=opts["launcher"], launcher_overrides=launcher_overrides)
    tol = Tolerances(capacity_rel=opts["capacity_rel"], latency_rel=opts["latency_rel"])
    return run_nightly(opts["results_dir"], ref, opts["out"], tol)


def simulated_requests(summary: dict) -> int:
    """The requests a saved run simulated: every probe's of every scheduler (a capacity or
    fixed-rate run), or every scheduler's offline run. The simulator's work grows with them (each
    request's prompt and output pass through its iterations), so they rank runs by length without
    a clock; 0 for a summary that says neither."""
    if summary.get("mode") == "offline":
        return sum(int(s.get("num_requests") or 0) for s in (summary.get("offline") or {}).values())
    return sum(int(p.get("num_completed") or 0) + int(p.get("num_errors") or 0)
               for s in (summary.get("schedulers") or {}).values() for p in (s.get("probes") or ()))


def run_order(reference: Path) -> list[Path]:
    """The reference runs' saved configs, longest first: by the requests each simulated (its
    summary.json beside it) times its pipeline stages (parallel.pp: each iteration is simulated
    through every stage). A rough rank, not a clock: alone at load 5-6 on the 2-core host,
    sarathi23_pipeline (20,000 requests, PP8) took 21.3 CPU s, yi34b_tp2_x4 (47,104, 4 replicas)
    20.3, yi34b_tp2_strict (49,152, sharegpt) 14.0, pd_mistral7b_paper_x4 (20,480) 8.1; most runs take 1-4.
    Ties, and runs without a summary (0), by path."""
    def work(config: Path) -> int:
        summary = config.parent / "summary.json"
        if not summary.is_file():
            return 0
        # PyYAML (OmegaConf's parser) in C: ~1 ms a config, where OmegaConf.load takes ~12
        pp = ((yaml.load(config.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {})
              .get("parallel") or {}).get("pp") or 1
        return simulated_requests(json.loads(summary.read_text())) * int(pp)

    return sorted(sorted(reference.glob("*/*/config.yaml")), key=work, reverse=True)  # stable: ties by path
