"""The published numbers (data/paper/sarathi_serve_osdi24.yaml) as frozen dataclasses.

Kept apart from the comparison code so the YAML is validated once, at load, with errors that
name the entry, instead of KeyErrors in the middle of a report.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

import yaml

PAPER_FILE = Path(__file__).resolve().parents[2] / "data" / "paper" / "sarathi_serve_osdi24.yaml"
SELECTOR_FIELDS = ("model", "gpu", "parallel", "dataset", "slo_kind", "scheduler")


@dataclass(frozen=True)
class Tolerance:
    rel: float | None = None
    abs: float | None = None

    def __post_init__(self):
        if (self.rel is None) == (self.abs is None):
            raise ValueError("a tolerance is exactly one of {rel: r} or {abs: a}")

    def within(self, published: float, reproduced: float) -> bool:
        if reproduced is None or not math.isfinite(reproduced):
            return False
        if self.rel is not None:
            return published != 0 and abs(reproduced / published - 1) <= self.rel
        return abs(reproduced - published) <= self.abs

    def describe(self) -> str:
        return f"±{self.rel:.0%}" if self.rel is not None else f"±{self.abs:g}"


@dataclass(frozen=True)
class Selector:
    """Which result rows one side of a ratio comes from; None = any, a tuple = any of."""
    model: str | None = None
    gpu: str | None = None
    parallel: str | None = None
    dataset: str | None = None
    slo_kind: str | None = None
    scheduler: str | tuple[str, ...] | None = None

    def items(self):
        return ((k, getattr(self, k)) for k in SELECTOR_FIELDS if getattr(self, k) is not None)


@dataclass(frozen=True)
class Published:
    """One published number: what it says, where (the paper's figure or section) and how close ours must be."""
    id: str
    claim: str
    source: str
    value: float
    tolerance: Tolerance


@dataclass(frozen=True)
class RatioClaim(Published):
    numerator: Selector
    denominator: Selector
    match: str = "cell"  # "cell": every matching cell pair; "up_to": the paper's value is a maximum
    metric: str = "capacity_qps"


@dataclass(frozen=True)
class Table4Row:
    dataset: str
    scheduler: str
    ttft_p50_s: float
    tbt_p99_s: float


@dataclass(frozen=True)
class Table4:
    source: str
    model: str
    parallel: str
    num_requests: int
    token_budget: int
    tolerance: Tolerance
    rows: tuple[Table4Row, ...]
    note: str = ""


@dataclass(frozen=True)
class PerfFact(Published):
    params: Mapping = field(default_factory=dict)  # model, gpu, tp, pp, chunk, prompts, bound, unit


@dataclass(frozen=True)
class Paper:
    title: str
    capacity_ratios: tuple[RatioClaim, ...]
    latency_ratios: tuple[RatioClaim, ...]
    table4: Table4
    perf_facts: tuple[PerfFact, ...]
    slos: Mapping  # model -> {strict, relaxed} P99 TBT seconds
    raw: Mapping = field(repr=False, default_factory=dict)


def _selector(d: Mapping | None) -> Selector:
    d = dict(d or {})
    unknown = set(d) - set(SELECTOR_FIELDS)
    if unknown:
        raise ValueError(f"unknown selector fields {sorted(unknown)}; known: {SELECTOR_FIELDS}")
    if isinstance(d.get("scheduler"), list):
        d["scheduler"] = tuple(d["scheduler"])
    return Selector(**d)


def _ratio(d: Mapping, metric: str) -> RatioClaim:
    try:
        return RatioClaim(
            id=d["id"], claim=d["claim"], source=d["source"], value=float(d["value"]),
            numerator=_selector(d["numerator"]), denominator=_selector(d["denominator"]),
            tolerance=Tolerance(**d["tolerance"]), match=d.get("match", "cell"), metric=d.get("metric", metric),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"paper entry {d.get('id', '?')}: {e}") from None


_PERF_KEYS = {"id", "claim", "source", "value", "tolerance"}


def load_paper(path: str | Path = PAPER_FILE) -> Paper:
    raw = yaml.safe_load(Path(path).read_text())
    t4 = raw["table4"]
    table4 = Table4(
        source=t4["source"], model=t4["model"], parallel=t4["parallel"], num_requests=int(t4["num_requests"]),
        token_budget=int(t4["token_budget"]), tolerance=Tolerance(**t4["tolerance"]),
        rows=tuple(Table4Row(**r) for r in t4["rows"]), note=str(t4.get("note", "")).strip(),
    )
    facts = tuple(
        PerfFact(id=f["id"], claim=f["claim"], source=f["source"], value=float(f["value"]),
                 tolerance=Tolerance(**f["tolerance"]),
                 params=MappingProxyType({k: v for k, v in f.items() if k not in _PERF_KEYS}))
        for f in raw.get("perf_facts", [])
    )
    return Paper(
        title=raw["paper"]["title"],
        capacity_ratios=tuple(_ratio(d, "capacity_qps") for d in raw.get("capacity_ratios", [])),
        latency_ratios=tuple(_ratio(d, "tbt_p50_s") for d in raw.get("latency_ratios", [])), table4=table4,
        perf_facts=facts, slos=MappingProxyType(raw["slos"]["p99_tbt_s"]), raw=MappingProxyType(raw),
    )
