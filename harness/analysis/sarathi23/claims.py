"""The first Sarathi paper's published numbers (data/paper/sarathi_2023.yaml) against ours.

`load_claims()` validates the YAML once (errors name the claim); `claim_table(claims, runs)` gives
one row per claim: published, reproduced, tolerance, within, and a note (the YAML's, where a miss
is explained, or why nothing was computed). Model claims are performance-model arithmetic
(engines/perf/queries.py); the others read the offline runs (sarathi23/runs.py).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType

import pandas as pd
import yaml

from harness.analysis.paper import Tolerance

CLAIMS_FILE = Path(__file__).resolve().parents[3] / "data" / "paper" / "sarathi_2023.yaml"
KINDS = ("model", "run", "ratio", "peak", "max")
_COMMON = {"id", "claim", "source", "kind", "value", "tolerance", "note"}


@dataclass(frozen=True)
class Claim:
    id: str
    claim: str
    source: str
    kind: str
    value: float
    tolerance: Tolerance
    params: Mapping = field(default_factory=dict)
    note: str = ""


def load_claims(path: str | Path = CLAIMS_FILE) -> tuple[Claim, ...]:
    raw = yaml.safe_load(Path(path).read_text())
    out = []
    for c in raw["claims"]:
        try:
            if c["kind"] not in KINDS:
                raise ValueError(f"kind {c['kind']!r} is not one of {', '.join(KINDS)}")
            out.append(Claim(c["id"], c["claim"], c["source"], c["kind"], float(c["value"]), Tolerance(**c["tolerance"]),
                             MappingProxyType({k: v for k, v in c.items() if k not in _COMMON}), str(c.get("note", ""))))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path}: claim {c.get('id', '?')}: {e}") from None
    return tuple(out)


@lru_cache(maxsize=8)
def _perf(model: str, gpu: str, stack: str):
    from engines.perf import Deployment, PerfModel

    return PerfModel(Deployment.create(model=model, gpu=gpu, stack=stack))


def model_value(p: Mapping) -> float:
    from engines.perf.queries import chunked_attention_time, chunked_prefill_time, decode_speedup

    perf = _perf(p["model"], p["gpu"], p.get("stack", "sarathi-2023"))
    metric = p["metric"]
    if metric.startswith("decode_speedup_"):
        fits = perf.kv_capacity_tokens(1.0)  # the paper's memory rule: B sequences of the length must fit
        grid = [decode_speedup(perf, b, c, p["chunk"], p.get("tile", 0))
                for c in p["contexts"] for b in p["batches"] if b * c <= fits]
        return float(max(grid) if metric.endswith("max") else min(grid))
    if metric in ("prefill_ratio", "prefill_loss"):
        ratio = chunked_prefill_time(perf, p["prompt"], p["chunk"]) / chunked_prefill_time(perf, p["prompt"], p["prompt"])
        return ratio - 1 if metric == "prefill_loss" else ratio
    if metric == "attention_ratio":
        return chunked_attention_time(perf, p["prompt"], p["chunk"]) / chunked_attention_time(perf, p["prompt"], p["prompt"])
    if metric == "tile_step":
        a, b = p["tokens"]
        return perf.iteration_time([b], [0]) / perf.iteration_time([a], [0]) - 1
    raise ValueError(f"unknown model metric {metric!r}")


def _value(runs: pd.DataFrame, experiment: str, scheduler: str, metric: str) -> float:
    hit = runs[(runs["experiment"] == experiment) & (runs["scheduler"] == scheduler)] if not runs.empty else runs
    if hit.empty:
        raise LookupError(f"no run of {experiment} ({scheduler})")
    return float(hit.iloc[-1][metric])


def _sweep(runs: pd.DataFrame, prefix: str, scheduler: str, metric: str) -> pd.Series:
    hit = runs[runs["experiment"].str.startswith(prefix) & (runs["scheduler"] == scheduler)] if not runs.empty else runs
    if hit.empty:
        raise LookupError(f"no run of {prefix}*")
    return hit.set_index("pd_ratio")[metric].astype(float).sort_index()


def reproduced(c: Claim, runs: pd.DataFrame) -> float:
    p = c.params
    if c.kind == "model":
        return model_value(p)
    if c.kind == "run":
        return _value(runs, p["experiment"], p["scheduler"], p["metric"])
    if c.kind == "ratio":
        num, den = p["numerator"], p["denominator"]
        return _value(runs, num["experiment"], num["scheduler"], p["metric"]) / \
            _value(runs, den["experiment"], den["scheduler"], p["metric"])
    sweep = _sweep(runs, p["prefix"], p["scheduler"], p.get("metric", "gain"))
    return float(sweep.idxmax()) if c.kind == "peak" else float(sweep.max())


def claim_table(claims: tuple[Claim, ...], runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for c in claims:
        row = {"id": c.id, "claim": c.claim, "source": c.source, "kind": c.kind, "published": c.value,
               "reproduced": float("nan"), "tolerance": c.tolerance.describe(), "within": None, "note": c.note}
        try:
            row["reproduced"] = reproduced(c, runs)
            row["within"] = c.tolerance.within(c.value, row["reproduced"])
        except LookupError as e:  # a run not made yet: said, never a silent pass
            row["note"] = f"not computed: {e}"
        rows.append(row)
    return pd.DataFrame(rows)


def within_count(table: pd.DataFrame) -> tuple[int, int]:
    judged = table["within"].dropna()
    return int(judged.astype(bool).sum()), len(judged)
