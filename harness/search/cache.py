"""Probe results cached on disk, so an interrupted capacity search resumes where it stopped.

A probe is fully determined by the resolved config, the scheduler, the seed and the rate (the
simulator is deterministic), and by the code: the cache key hashes the config (less the keys
that say how it ran, not what: harness.settings.experiment HOW_NOT_WHAT) with the git commit, the
package version and, in a checkout with uncommitted changes, a digest of them (results/store.py
worktree_changes). A probe is one JSON file (verdict, summary) plus a Parquet file (per-request
rows), each written atomically.
Token times are not cached (they are large); a run that needs them re-runs that one probe.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from common.errors import RunBroken
from harness.metrics import Distribution, SloVerdict, Summary
from harness.results.claim import atomic_write, unwritable
from harness.search.probe import ProbeOutcome
from harness.settings.experiment import HOW_NOT_WHAT


def code_version(provenance: dict, profile_digest: str = "") -> str:
    """What the probes were computed by: the commit, the package version, a measured profile's
    digest and, in an edited checkout, its changes' digest (clean checkouts keep their old keys)."""
    code = f"{provenance['git_commit']}/{provenance['versions'].get('sarathi-harness')}/{profile_digest}"
    return code + f"/{provenance['git_changes']}" if provenance.get("git_changes") else code


def cache_key(config: dict, code_version: str) -> str:
    relevant = {k: v for k, v in config.items() if k not in HOW_NOT_WHAT}
    for group, _, key in (k.partition(".") for k in HOW_NOT_WHAT if "." in k):
        if isinstance(relevant.get(group), dict):
            relevant[group] = {k: v for k, v in relevant[group].items() if k != key}
    blob = json.dumps({"config": relevant, "code": code_version}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class ProbeCache:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _paths(self, scheduler: str, seed: int, qps: float) -> tuple[Path, Path]:
        # Names spelled out: Path.with_suffix would take the ".5" of "qps=2.5" for a suffix.
        stem = self.root / scheduler / f"seed={seed}" / f"qps={qps!r}"
        return stem.parent / f"{stem.name}.json", stem.parent / f"{stem.name}.parquet"

    def load(self, scheduler: str, seed: int, qps: float):
        meta, rows = self._paths(scheduler, seed, qps)
        if not (meta.exists() and rows.exists()):
            return None
        d = json.loads(meta.read_text())
        summary = Summary(**{k: Distribution(**v) if isinstance(v, dict) else v for k, v in d["summary"].items()})
        return ProbeOutcome(d["qps"], d["seed"], SloVerdict(**d["verdict"]), summary, pd.read_parquet(rows), None,
                            scaling=d.get("scaling"))

    def save(self, scheduler: str, outcome: ProbeOutcome) -> None:
        """A disk that refuses the probe breaks the run (RunBroken): its results could not be
        saved either, and a search that goes on unable to save would lose hours of probes."""
        meta_path, rows_path = self._paths(scheduler, outcome.seed, outcome.qps)
        meta = {"qps": outcome.qps, "seed": outcome.seed, "verdict": asdict(outcome.verdict), "summary": asdict(outcome.summary)}
        if outcome.scaling is not None:  # an autoscaled fleet's report (cluster.autoscale): kept with the probe
            meta["scaling"] = outcome.scaling
        try:
            meta_path.parent.mkdir(parents=True, exist_ok=True)
            # Rows first: a probe counts as cached only once its JSON exists.
            atomic_write(rows_path, lambda p: outcome.requests.to_parquet(p, index=False))
            atomic_write(meta_path, lambda p: p.write_text(json.dumps(meta)))
        except OSError as e:
            raise RunBroken(f"the probe cache: {unwritable(meta_path.parent, e)}") from None


