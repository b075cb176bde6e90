"""The first Sarathi paper's published numbers (data/paper/sarathi_2023.yaml) against ours.

`load_claims()` validates the YAML once (errors name the claim): every tolerance is relative and
carries its one-line reason (`tolerance_reason`); `sense: at_least` marks a published lower bound
("over 2x"), within when the reproduced value is at least value x (1 - rel). `role: input` marks a
published number the performance model takes as its input (the paper's own operator measurements):
shown beside the model's value, never judged or counted; `role: shown` one the paper gives without
saying what it spans, shown, not judged. `claim_table(claims,
runs)` gives one row per claim: published, reproduced, tolerance, within, and a note (the YAML's,
where a miss is explained, or why nothing was computed). Model claims are performance-model
arithmetic (engines/perf/queries.py); the others read the offline runs (sarathi23/runs.py).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType

import pandas as pd
import yaml

from harness.analysis.paper import Tolerance

CLAIMS_FILE = Path(__file__).resolve().parents[3] / "data" / "paper" / "sarathi_2023.yaml"
KINDS = ("model", "run", "ratio", "peak", "max", "min")
_COMMON = {"id", "claim", "source", "kind", "value", "tolerance", "tolerance_reason", "sense", "note", "role"}
SENSES = ("about", "at_least")
ROLES = ("check", "input", "shown")  # judged; the model's input; shown without a judgement


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
    tolerance_reason: str = ""
    sense: str = "about"  # at_least: the paper gives a lower bound
    role: str = "check"

    @property
    def judged(self) -> bool:
        return self.role == "check"

    def within(self, reproduced: float) -> bool:
        if self.sense == "at_least":
            return reproduced >= self.value * (1 - self.tolerance.rel)
        return self.tolerance.within(self.value, reproduced)

    def describe_tolerance(self) -> str:
        bound = f">= {self.value * (1 - self.tolerance.rel):.3g}" if self.sense == "at_least" else self.tolerance.describe()
        return f"{bound} ({self.tolerance_reason})"


def load_claims(path: str | Path = CLAIMS_FILE) -> tuple[Claim, ...]:
    raw = yaml.safe_load(Path(path).read_text())
    out = []
    for c in raw["claims"]:
        try:
            if c["kind"] not in KINDS:
                raise ValueError(f"kind {c['kind']!r} is not one of {', '.join(KINDS)}")
            tol = Tolerance(**c["tolerance"])
            if tol.rel is None:
                raise ValueError("the tolerance must be relative ({rel: r})")
            if not str(c.get("tolerance_reason", "")).strip():
                raise ValueError("the tolerance needs its one-line reason (tolerance_reason)")
            if c.get("sense", "about") not in SENSES:
                raise ValueError(f"sense {c['sense']!r} is not one of {', '.join(SENSES)}")
            if c.get("role", "check") not in ROLES:
                raise ValueError(f"role {c['role']!r} is not one of {', '.join(ROLES)}")
            out.append(Claim(c["id"], c["claim"], c["source"], c["kind"], float(c["value"]), tol,
                             MappingProxyType({k: v for k, v in c.items() if k not in _COMMON}), str(c.get("note", "")),
                             str(c["tolerance_reason"]).strip(), c.get("sense", "about"), c.get("role", "check")))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path}: claim {c.get('id', '?')}: {e}") from None
    return tuple(out)


@lru_cache(maxsize=8)
def _perf(model: str, gpu: str, stack: str, attention: str | None = None):
    from engines.perf import Deployment, PerfModel

    return PerfModel(Deployment.create(model=model, gpu=gpu, stack=stack, attention_kernel=attention))


def model_value(p: Mapping, attention: str | None = None) -> float:
    """A model claim's value; `attention` prices it with another attention kernel (a what-if)."""
    from engines.perf.queries import chunked_attention_time, chunked_prefill_time, decode_speedup

    from harness.analysis.sarathi23.operator_table import OPERATOR_METRICS

    perf = _perf(p["model"], p["gpu"], p.get("stack", "sarathi-2023"), attention)
    metric = p["metric"]
    if metric in OPERATOR_METRICS:
        return OPERATOR_METRICS[metric](perf, p)
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


def reproduced(c: Claim, runs: pd.DataFrame, attention: str | None = None) -> float:
    p = c.params
    if c.kind == "model":
        return model_value(p, attention)
    if c.kind == "run":
        return _value(runs, p["experiment"], p["scheduler"], p["metric"])
    if c.kind == "ratio":
        num, den = p["numerator"], p["denominator"]
        return _value(runs, num["experiment"], num["scheduler"], p["metric"]) / \
            _value(runs, den["experiment"], den["scheduler"], p["metric"])
    sweep = _sweep(runs, p["prefix"], p["scheduler"], p.get("metric", "gain"))
    return float(sweep.idxmax()) if c.kind == "peak" else float(sweep.max() if c.kind == "max" else sweep.min())


def claim_table(claims: tuple[Claim, ...], runs: pd.DataFrame, attention: str | None = None) -> pd.DataFrame:
    """One row per claim; `attention` prices the model claims with another attention kernel (the runs
    must then have been made with it too: benchmarks/sarathi23_masked_tiles.py)."""
    rows = []
    for c in claims:
        row = {"id": c.id, "claim": c.claim, "source": c.source, "kind": c.kind, "role": c.role, "published": c.value,
               "reproduced": float("nan"), "tolerance": c.describe_tolerance(), "within": None, "note": c.note}
        try:
            row["reproduced"] = reproduced(c, runs, attention)
            row["within"] = c.within(row["reproduced"]) if c.judged else None
        except LookupError as e:  # a run not made yet: said, never a silent pass
            row["note"] = f"not computed: {e}"
        rows.append(row)
    return pd.DataFrame(rows)


def within_count(table: pd.DataFrame) -> tuple[int, int]:
    """(checks within tolerance, checks with a result): inputs and shown rows are not checks."""
    judged = table[table["role"] == "check"]["within"].dropna()
    return int(judged.astype(bool).sum()), len(judged)


PIPELINE_CLAIMS = ("pipeline_bubble_ratio", "pipeline_replicas_vs_orca", "pipeline_sarathi_vs_orca", "pipeline_sarathi_vs_replicas")


def _priced(c: Claim, suffix: str) -> Claim:
    """The claim read from the pipeline cells of another CPU-cost choice (their names + `suffix`)."""
    params = {k: ({**v, "experiment": v["experiment"] + suffix} if k in ("numerator", "denominator") else v)
              for k, v in c.params.items()}
    return replace(c, params=MappingProxyType(params))


def pipeline_table(claims: tuple[Claim, ...], runs: pd.DataFrame, choices: Mapping[str, str]) -> pd.DataFrame:
    """The pipeline study's claims under each CPU-cost choice (choice -> the suffix of its cells,
    matrix.CPU_COSTS): one row per claim, published and one column per choice (NaN: not run)."""
    rows = []
    for c in (c for c in claims if c.id in PIPELINE_CLAIMS):
        row = {"claim": c.claim, "published": c.value}
        for choice, suffix in choices.items():
            try:
                row[choice] = reproduced(_priced(c, suffix), runs)
            except LookupError:
                row[choice] = float("nan")
        rows.append(row)
    return pd.DataFrame(rows)
