"""Nightly drift check: today's results against a reference results tree.

`compare(current, reference, tolerances)` pairs every cell (experiment x deployment x dataset x
SLO x mode x scheduler, see analysis.loader.CELL_KEY) of the reference with the current tree and
judges the relative change of

  capacity searches   capacity_qps (capacity_mean_qps over seeds when repeated; default: 5 % relative)
  fixed-rate runs     P50 TTFT and P99 TBT of the probe (default: 10 % relative)
  offline runs        token throughput of each scheduler (harness/analysis/offline_runs.py; the
                      capacity tolerance), a cell being (experiment, scheduler)

A cell present in the reference and absent today fails (a silently dropped experiment is a
regression too) unless `fail_on_missing=False`; cells only present today are listed, never fail.

    python -m harness.analysis.drift [current=results] [reference=results/reference] [out=figures/DRIFT.md]
        [capacity_rel=0.05] [latency_rel=0.10] [allow_missing=false]

exits 0 when everything is within tolerance, 1 on drift, 2 on bad input.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from common.errors import HarnessError
from harness.analysis.loader import CELL_KEY, load_results
from harness.analysis.tables import markdown
from harness.overrides import exits_2, parse as parse_overrides

KEY = tuple(CELL_KEY)
LATENCY_METRICS = ("ttft_p50_s", "tbt_p99_s")


@dataclass(frozen=True)
class Tolerances:
    capacity_rel: float = 0.05
    latency_rel: float = 0.10
    fail_on_missing: bool = True

    def __post_init__(self):
        if not (self.capacity_rel >= 0 and self.latency_rel >= 0):
            raise HarnessError(f"tolerances must be >= 0, got {self.capacity_rel}, {self.latency_rel}")


@dataclass(frozen=True)
class DriftRow:
    cell: tuple  # values of KEY
    metric: str
    reference: float
    current: float
    rel_change: float  # (current - reference) / reference; nan when either side is missing
    tolerance: float
    status: str  # ok | drift | missing | new
    note: str = ""

    @property
    def label(self) -> dict:
        return dict(zip(KEY, self.cell))


@dataclass(frozen=True)
class DriftReport:
    current_dir: Path
    reference_dir: Path
    tolerances: Tolerances
    rows: tuple[DriftRow, ...] = field(default_factory=tuple)

    @property
    def failures(self) -> tuple[DriftRow, ...]:
        bad = {"drift"} | ({"missing"} if self.tolerances.fail_on_missing else set())
        return tuple(r for r in self.rows if r.status in bad)

    @property
    def passed(self) -> bool:
        # An empty reference proves nothing: treat "nothing compared" as a failure, not a pass.
        return not self.failures and any(r.status == "ok" for r in self.rows)

    def to_markdown(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        counts = {s: sum(r.status == s for r in self.rows) for s in ("ok", "drift", "missing", "new")}
        head = [
            f"# Nightly drift report: {verdict}",
            "",
            f"Current `{self.current_dir}` vs reference `{self.reference_dir}`. Tolerances: capacity "
            f"±{self.tolerances.capacity_rel:.1%} relative, fixed-rate latencies ±{self.tolerances.latency_rel:.1%} "
            f"relative; missing cells {'fail' if self.tolerances.fail_on_missing else 'are reported only'}.",
            "",
            f"{counts['ok']} within, {counts['drift']} drifted, {counts['missing']} missing today, {counts['new']} new.",
            "",
        ]
        if not self.rows:
            return "\n".join(head + ["No results in the reference tree: nothing was compared.", ""])
        order = {"drift": 0, "missing": 1, "new": 2, "ok": 3}
        rows = sorted(self.rows, key=lambda r: (order[r.status], r.cell, r.metric))
        body = [(r.status.upper() if r.status != "ok" else "ok", r.label["experiment"], r.label["model"],
                 r.label["parallel"], r.label["dataset"], r.label["slo_kind"], r.label["scheduler"],
                 r.metric, r.reference, r.current,
                 "—" if math.isnan(r.rel_change) else f"{r.rel_change:+.1%}", f"±{r.tolerance:.1%}", r.note)
                for r in rows]
        return "\n".join(head + [markdown(body, ("status", "experiment", "model", "parallel", "dataset", "SLO",
                                                 "scheduler", "metric", "reference", "current", "change",
                                                 "tolerance", "note")), ""])

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_markdown())
        return path


def _judge(cell: tuple, metric: str, ref: float, cur: float, tol: float, note: str = "") -> DriftRow:
    # ref == cur covers 0 == 0 (nothing passed either time)
    ch = 0.0 if ref == cur else math.inf if ref == 0 or not math.isfinite(ref) else (cur - ref) / ref
    return DriftRow(cell, metric, ref, cur, ch, tol, "ok" if abs(ch) <= tol else "drift", note)


def _cells(df: pd.DataFrame) -> dict[tuple, pd.Series]:
    # NaN != NaN would break dict lookups on fixed_qps of capacity runs: key on a placeholder.
    return {tuple("-" if isinstance(v, float) and math.isnan(v) else v for v in row[list(KEY)]): row
            for _, row in df.iterrows()}


def _paired(ref: dict, cur: dict, metrics, tol: float, note=lambda r, c: "") -> list[DriftRow]:
    """Each reference cell's `metrics(r, c)` judged against today's (`c` None: missing today, a
    failure), then the cells only today has (new, never a failure)."""
    out = []
    for cell, r in ref.items():
        c = cur.get(cell)
        out += [DriftRow(cell, m, float(r[m]), math.nan, math.nan, tol, "missing", "no current result for this cell")
                if c is None else _judge(cell, m, float(r[m]), float(c[m]), tol, note(r, c)) for m in metrics(r, c)]
    return out + [DriftRow(cell, m, math.nan, float(c[m]), math.nan, tol, "new")
                  for cell, c in cur.items() if cell not in ref for m in metrics(c, None)]


def _capacity_metrics(r: pd.Series, c: pd.Series | None = None) -> list[str]:
    # Over several seeds the mean is the steadier number to watch; one seed: its capacity. One side
    # repeated over seeds, the other not: compare first seeds.
    metric = "capacity_mean_qps" if r.get("num_seeds", 1) > 1 else "capacity_qps"
    return [metric if c is None or _capacity_metrics(c) == [metric] else "capacity_qps"]


def _capacity_note(r: pd.Series, c: pd.Series) -> str:
    notes = []
    if bool(r["saturated"]) != bool(c["saturated"]):
        notes.append(f"saturated {bool(r['saturated'])} -> {bool(c['saturated'])}")
    for col, what in (("num_requests", "requests/probe"), ("token_budget", "token budget"),
                      ("max_num_seqs", "max batch"), ("num_seeds", "seeds")):
        a, b = r[col], c[col]
        if not (a == b or (pd.isna(a) and pd.isna(b))):
            notes.append(f"{what} {a} -> {b}")  # a changed setting explains (but does not excuse) drift
    return "; ".join(notes)


def _fixed_rate_probes(probes: pd.DataFrame) -> pd.DataFrame:
    if probes.empty:
        return probes
    p = probes[probes["mode"] == "fixed_rate"]
    return p[p["seed"] == p["run_seed"]]  # one probe per cell: the run's first seed


def _verdict_note(r: pd.Series, c: pd.Series) -> str:
    word = {True: "pass", False: "FAIL"}
    return "" if bool(r["passed"]) == bool(c["passed"]) else f"verdict {word[bool(r['passed'])]} -> {word[bool(c['passed'])]}"


def _offline_cells(root) -> dict[tuple, dict]:
    """Offline runs (mode offline): each scheduler's token throughput, the newest run of a cell."""
    from harness.analysis.offline_runs import load_offline

    df = load_offline(root).drop_duplicates(["experiment", "scheduler"], keep="last")
    return {(r.experiment, r.model, r.gpu, r.parallel, r.instances, "", "", r.dataset, "-", "-", "offline", "-",
             r.scheduler): {"token_throughput": float(r.token_throughput)} for r in df.itertuples(index=False)}


def compare(current_results_dir: str | Path, reference_dir: str | Path,
            tolerances: Tolerances | None = None) -> DriftReport:
    """Judge every reference cell's capacity (and fixed-rate latencies) against the current tree."""
    tol = tolerances or Tolerances()
    # An empty tree loads as frames with every column (loader.RUN_COLUMNS): nothing compared, nothing new.
    (ref_runs, ref_p), (cur_runs, cur_p) = load_results(reference_dir), load_results(current_results_dir)
    capacity = [_cells(df[df["mode"] != "fixed_rate"]) for df in (ref_runs, cur_runs)]
    rows = (_paired(*capacity, _capacity_metrics, tol.capacity_rel, _capacity_note)
            + _paired(_cells(_fixed_rate_probes(ref_p)), _cells(_fixed_rate_probes(cur_p)), lambda r, c: LATENCY_METRICS,
                      tol.latency_rel, _verdict_note)
            + _paired(_offline_cells(reference_dir), _offline_cells(current_results_dir), lambda r, c: ("token_throughput",),
                      tol.capacity_rel))
    return DriftReport(Path(current_results_dir), Path(reference_dir), tol, tuple(rows))


def run_nightly(current_results_dir: str | Path = "results", reference_dir: str | Path = "results/reference",
                out: str | Path = "figures/DRIFT.md", tolerances: Tolerances | None = None) -> int:
    """compare(), write the markdown report to `out`, print one line; returns the exit status."""
    ref = Path(reference_dir)
    if not ref.is_dir():
        raise HarnessError(f"reference results directory {ref} does not exist")
    report = compare(current_results_dir, reference_dir, tolerances)
    path = report.write(out)
    n = len(report.failures)
    print(f"nightly: {'PASS' if report.passed else 'FAIL'} ({n} failing of {len(report.rows)} checks); report: {path}")
    return 0 if report.passed else 1


@exits_2
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.analysis.drift", description=__doc__.split("\n\n")[0])
    ap.add_argument("current", nargs="?", default="results")
    ap.add_argument("reference", nargs="?", default="results/reference")
    ap.add_argument("--out", default="figures/DRIFT.md")
    ap.add_argument("--capacity-rel", type=float, default=Tolerances.capacity_rel)
    ap.add_argument("--latency-rel", type=float, default=Tolerances.latency_rel)
    ap.add_argument("--allow-missing", action="store_true", help="cells missing today are reported, not failed")
    a = parse_overrides(ap, sys.argv[1:] if argv is None else argv)
    return run_nightly(a.current, a.reference, a.out, Tolerances(a.capacity_rel, a.latency_rel, not a.allow_missing))


if __name__ == "__main__":
    sys.exit(main())
