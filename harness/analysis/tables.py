"""Markdown rendering of the comparison frames (no `tabulate` dependency: the tables are small)."""
from __future__ import annotations

import math
import os
from pathlib import Path
from collections.abc import Sequence

import pandas as pd

from harness.analysis import style


def fmt(x, digits: int = 3) -> str:
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        if math.isnan(x):
            return "—"
        if math.isinf(x):
            return "∞"
        # Budgets, request counts and large rates read as numbers, not 2.05e+03.
        if x.is_integer() or abs(x) >= 10 ** digits:
            return f"{x:.0f}"
        return f"{x:.{digits}g}"
    return str(x).replace("|", "\\|")


def num(v, spec: str = ".3g") -> str:
    """`v` in `spec`, or "—" where there is no number (None, NaN, infinite)."""
    return "—" if v is None or not math.isfinite(v) else format(v, spec)


def markdown(rows: Sequence[Sequence], header: Sequence[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def verdict(within) -> str:
    if within is None or (isinstance(within, float) and math.isnan(within)):
        return "not reproduced (missing results)"
    return "within" if bool(within) else "**outside**"


def comparison_markdown(df: pd.DataFrame) -> str:
    """Paper-vs-reproduced rows (compare.COMPARISON_COLUMNS)."""
    rows = [(r["claim"], r["source"], r["published"], r["reproduced"], r["ratio"], r["tolerance"],
             verdict(r["within"]), "; ".join(x for x in (r["cells"], r["note"]) if x))
            for _, r in df.iterrows()]
    return markdown(rows, ("claim", "source", "published", "reproduced", "reproduced / published",
                           "tolerance", "verdict", "cells (capacities) and notes"))


def table4_markdown(t4: pd.DataFrame) -> str:
    """Table 4 in the paper's shape: one row per dataset x scheduler, P50 TTFT and P99 TBT side by side."""
    rows = []
    for (dataset, scheduler), g in t4.groupby(["dataset", "scheduler"], sort=False):
        ttft = g[g["metric"] == "ttft_p50_s"].iloc[0]
        tbt = g[g["metric"] == "tbt_p99_s"].iloc[0]
        rows.append((style.dataset_label(dataset), style.scheduler_label(scheduler), ttft["qps"],
                     ttft["published"], ttft["reproduced"], verdict(ttft["within"]),
                     tbt["published"], tbt["reproduced"], verdict(tbt["within"]),
                     "; ".join(x for x in {ttft["note"], tbt["note"]} if x)))
    return markdown(rows, ("dataset", "scheduler", "load (QPS)", "P50 TTFT paper (s)", "P50 TTFT ours (s)", "",
                           "P99 TBT paper (s)", "P99 TBT ours (s)", "", "notes"))


def orderings_markdown(o: pd.DataFrame) -> str:
    labels = {"ttft_p50_s": "P50 TTFT", "tbt_p99_s": "P99 TBT"}
    rows = [(style.dataset_label(r["dataset"]), labels.get(r["metric"], r["metric"]), r["published_order"],
             r["reproduced_order"], bool(r["same"])) for _, r in o.iterrows()]
    return markdown(rows, ("dataset", "metric", "paper (lowest first)", "ours (lowest first)", "same ranking"))


def perf_facts_markdown(df: pd.DataFrame) -> str:
    rows = [(r["claim"], r["source"], r["published"], r["reproduced"], r["tolerance"],
             "within" if r["within"] else ("**outside**" if not r["note"] else "not computed"), r["note"])
            for _, r in df.iterrows()]
    return markdown(rows, ("fact", "source", "published", "performance model", "tolerance", "verdict", "note"))


def capacity_markdown(runs: pd.DataFrame) -> str:
    """Every (run, scheduler) the report read: the raw numbers behind the figures."""
    cols = ["experiment", "run", "model", "parallel", "gpu", "dataset", "num_requests", "slo_kind", "slo_tbt_s",
            "scheduler", "token_budget", "max_num_seqs", "capacity_qps", "capacity_ttft_p99_s", "capacity_completed_per_s",
            "capacity_starvation", "bracket_hi_qps", "saturated", "num_seeds", "git_commit", "results_from"]
    r = runs.sort_values(["num_gpus", "model", "parallel", "dataset", "slo_tbt_s", "experiment", "scheduler"])
    rows = []
    for row, why in zip(r[cols].itertuples(index=False), r["settings"].fillna("")):
        cells = [(str(v)[:10] if c == "git_commit" and v else Path(v).name if c == "results_from" else v)
                 for c, v in zip(cols, row)]
        if why:  # not at the paper's settings: marked, and the report says why
            cells[0] = f"✱ {cells[0]}"
        rows.append(tuple(cells))
    return markdown(rows, ("experiment", "run", "model", "parallel", "GPU", "dataset", "requests/probe", "SLO",
                           "P99 TBT SLO (s)", "scheduler", "token budget", "max batch", "capacity (QPS)",
                           "P99 TTFT at capacity (s)", "completed at capacity (req/s)", "looks starved (harness/starvation.py)",
                           "lowest failing (QPS)", "saturated", "seeds", "commit", "from"))


def score(df: pd.DataFrame) -> str:
    """"N of M reproduced numbers within tolerance" of a comparison frame (its `within` column)."""
    judged = df["within"].dropna()
    return f"{int(judged.astype(bool).sum())} of {len(judged)} reproduced numbers within tolerance" + (
        f", {len(df) - len(judged)} without results" if len(df) > len(judged) else "")


def rel(path: Path, start: Path) -> str:
    """`path` relative to `start`, with forward slashes: a link in a markdown file under `start`."""
    return Path(os.path.relpath(path, start)).as_posix()


def figure_lines(o, figures_dir: Path, heading: str = "###") -> list[str]:
    """A figure outcome (harness.analysis.figures.FigureOutcome) under its title: the image and its
    caption, or why it was skipped."""
    if o.path is None:
        return [f"{heading} {o.title}", "", f"_Skipped: {o.skipped}._", ""]
    return [f"{heading} {o.title}", "", f"![{o.title}]({rel(o.path, figures_dir)})", *(["", o.caption] if o.caption else []), ""]


def left_out_markdown(left_out: pd.DataFrame, header: Sequence[str]) -> str:
    """The runs a study left out (one row each, the last column why)."""
    return markdown([tuple(r) for r in left_out.itertuples(index=False)], header)

