"""Run many experiment configs, in parallel, skipping those that already have a finished run.

A config is identified by its resolved `config.yaml` (less where output goes): a run directory
whose saved config is identical is that config's finished run. Used by `figure=all` (run what
the report misses) and `nightly` (re-run every reference run's saved config).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from common.errors import HarnessError, RunBroken
from harness.config.diff import differences

OUTPUT_KEYS = ("results_dir", "progress", "cache", "search.workers")  # search.workers: how fast, not what


def _same(a: DictConfig, b: DictConfig) -> bool:
    """The same experiment: every setting both have agrees, except where output goes
    (harness.config.diff: a key only one side has is a knob added since the other was saved)."""
    return not differences(OmegaConf.to_container(a, resolve=True), OmegaConf.to_container(b, resolve=True), OUTPUT_KEYS)


def find_run(cfg: DictConfig) -> Path | None:
    """The newest finished run of this config under cfg.results_dir, if any (`_same`)."""
    base = Path(cfg.results_dir) / str(cfg.name)
    if not base.is_dir():
        return None
    for run in sorted((d for d in base.iterdir() if not d.name.startswith(".")), reverse=True):
        saved = run / "config.yaml"
        if (run / "summary.json").exists() and saved.exists() and _same(OmegaConf.load(saved), cfg):
            return run
    return None


def _run_one(cfg_yaml: str) -> tuple[str, str | None, str]:
    """(name, run dir or None if it failed, everything it printed): jobs run side by side, so
    their output is kept and printed whole when each ends, never interleaved."""
    import contextlib
    import io
    import traceback

    from harness.commands.run import run_experiment

    cfg = OmegaConf.create(cfg_yaml)
    out = io.StringIO()
    path = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            path = str(run_experiment(cfg))
        except (HarnessError, RunBroken) as e:
            print(f"error: {e}")
        except Exception:  # one job's crash must not take the others' results with it
            traceback.print_exc()
    return str(cfg.name), path, out.getvalue()


def run_configs(configs: Sequence[DictConfig], n_jobs: int = 2, only_missing: bool = True) -> list[Path]:
    """Run every config without a finished run (all of them if not `only_missing`); returns run
    dirs. Each job's output prints as one labelled block when it ends; a job that fails is named
    after all have run (HarnessError), and a rerun does only what is still missing."""
    from joblib import Parallel, delayed

    todo = [c for c in configs if not (only_missing and find_run(c) is not None)]
    done = [find_run(c) for c in configs if c not in todo]
    print(f"matrix: {len(configs)} configs, {len(configs) - len(todo)} already have results, running {len(todo)}", flush=True)
    failed = []
    if todo:
        jobs = Parallel(n_jobs=n_jobs, backend="loky", return_as="generator_unordered")(
            delayed(_run_one)(OmegaConf.to_yaml(c)) for c in todo)
        for k, (name, path, text) in enumerate(jobs, 1):
            status = "done" if path else "FAILED"
            print(f"\n── [{k}/{len(todo)}] {name}: {status} " + "─" * max(0, 60 - len(name)), flush=True)
            print(text.rstrip(), flush=True)
            if path:
                done.append(Path(path))
            else:
                failed.append(name)
    if failed:
        raise HarnessError(f"{len(failed)} of {len(todo)} configs failed: {', '.join(failed)} (their output is above; "
                           f"the others' results are saved, and a rerun runs only what is missing)")
    return done
