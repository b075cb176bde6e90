"""Reproduced vs published: pure functions from the loader's frames and the paper's claims to
comparison tables (one row per published number).

A claim's two sides are chosen by selectors (paper.Selector) and paired on every context column
the two selectors agree on: "Sarathi vs vLLM, Yi-34B strict sharegpt" pairs rows of the same
deployment, dataset and SLO; "Sarathi TP4-PP2 vs vLLM TP-8" pairs across deployments because the
selectors name different `parallel` values.
"""
from __future__ import annotations

import math

import pandas as pd

from harness.analysis.paper import Paper, RatioClaim, Selector, Table4

CONTEXT = ("model", "gpu", "parallel", "dataset", "slo_kind", "slo_tbt_s")
MAIN_SCHEDULERS = ("sarathi", "vllm", "orca", "fastertransformer")
ABLATION_SCHEDULERS = ("hybrid_only", "chunked_only", "sarathi")
COMPARISON_COLUMNS = ("id", "claim", "source", "published", "reproduced", "ratio", "tolerance", "within", "cells", "note")


def _claim_row(claim: RatioClaim, reproduced: float, cells: str, note: str = "") -> dict:
    """One row of a paper-vs-reproduced table (`reproduced` NaN: no result, judged neither way)."""
    within = None if math.isnan(reproduced) else claim.tolerance.within(claim.value, reproduced)
    return {"id": claim.id, "claim": claim.claim, "source": claim.source, "published": claim.value,
            "reproduced": reproduced, "ratio": reproduced / claim.value, "tolerance": claim.tolerance.describe(),
            "within": within, "cells": cells, "note": note}


def capacity_mode(runs: pd.DataFrame) -> pd.DataFrame:
    """Rows of capacity searches. A fixed-rate run (`search.fixed_qps`) records its rate as
    "capacity" when the one probe passed and 0 otherwise: a verdict, not a capacity."""
    return runs[runs["mode"] != "fixed_rate"] if not runs.empty else runs


def select(df: pd.DataFrame, sel: Selector) -> pd.DataFrame:
    mask = pd.Series(True, index=df.index)
    for k, v in sel.items():
        mask &= df[k].isin(v) if isinstance(v, tuple) else df[k] == v
    return df[mask]


def paper_config(runs: pd.DataFrame, paper: Paper) -> pd.Series:
    """True where a row ran the paper's knobs for its scheduler (token budget, max batch).

    Why: an ablation run of Sarathi at budget 1024 on the strict sharegpt cell must not stand in
    for the paper's Sarathi (budget 512) in a capacity ratio. Schedulers the paper sets no knob for
    pass.
    """
    s = paper.raw.get("scheduler_settings", {})
    budgets, orca = s.get("sarathi_token_budget", {}), s.get("orca_max_batch", {})

    def ok(row) -> bool:  # the knob the paper sets for the row's scheduler (want None: none)
        budget = budgets.get(f"{row['model']}_{row['slo_kind']}", budgets.get(row["slo_kind"]))
        knob, want = {"sarathi": ("token_budget", budget), "orca": ("max_num_seqs", orca.get(row["model"])),
                      "vllm": ("max_num_seqs", s.get("vllm_max_batch"))}.get(row["scheduler"], ("", None))
        return want is None or row[knob] == want

    if runs.empty:
        return pd.Series(dtype=bool)
    return runs.apply(ok, axis=1).astype(bool)


def _pair_columns(claim: RatioClaim) -> list[str]:
    return [c for c in CONTEXT if getattr(claim.numerator, c, None) == getattr(claim.denominator, c, None)]


def _cell_label(row: pd.Series, suffix: str) -> str:
    return f"{row['model' + suffix]} {row['parallel' + suffix]} {row['dataset' + suffix]} {row['slo_kind' + suffix]} {row['scheduler' + suffix]}"


def _pairs(num: pd.DataFrame, den: pd.DataFrame, claim: RatioClaim) -> pd.DataFrame:
    on = _pair_columns(claim)
    if num.empty or den.empty:
        return pd.DataFrame()
    if on:
        return num.merge(den, on=on, suffixes=("_num", "_den"))
    return num.merge(den, how="cross", suffixes=("_num", "_den"))


def _col(p: pd.DataFrame, name: str, side: str) -> pd.Series:
    # After a merge, a pairing column keeps its bare name; the others get the side suffix.
    return p[f"{name}_{side}"] if f"{name}_{side}" in p else p[name]


def _sides(df: pd.DataFrame, claim: RatioClaim) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """The claim's numerator and denominator rows, and why it has no result when a side has none."""
    num, den = select(df, claim.numerator), select(df, claim.denominator)
    side = "numerator" if num.empty else "denominator" if den.empty else ""
    return num, den, side and f"no results for the {side} ({_describe(getattr(claim, side))})"


NO_PAIR = "no result pair shares the claim's deployment/dataset/SLO"


def capacity_ratio_row(runs: pd.DataFrame, claim: RatioClaim) -> dict:
    num, den, missing = _sides(runs, claim)
    p = _pairs(num, den, claim)  # empty when a side is
    if p.empty:
        return _claim_row(claim, math.nan, "", missing or NO_PAIR)
    cap_n, cap_d = _col(p, "capacity_qps", "num"), _col(p, "capacity_qps", "den")
    p = p.assign(_ratio=[n / d if d > 0 else math.inf for n, d in zip(cap_n, cap_d)],
                 _newest=[max(a, b) for a, b in zip(_col(p, "run", "num"), _col(p, "run", "den"))])
    # "up to N x": the paper reports its best cell; compare with ours. Otherwise the newest pair.
    best = p.loc[p["_ratio"].idxmax()] if claim.match == "up_to" else p.sort_values("_newest").iloc[-1]
    for side in ("num", "den"):  # bring pairing columns back under both suffixes for labelling
        for c in CONTEXT + ("scheduler",):
            if f"{c}_{side}" not in best:
                best[f"{c}_{side}"] = best[c]
    r = float(best["_ratio"])
    notes = []
    if best["saturated_num"]:
        notes.append("numerator saturated: ratio is a lower bound")
    if best["saturated_den"]:
        notes.append("denominator saturated: ratio is an upper bound")
    if claim.match == "up_to" and len(p) > 1:
        notes.append(f"best of {len(p)} cells")
    for side, what in (("num", "numerator"), ("den", "denominator")):  # harness/starvation.py
        starved = best.get(f"capacity_starvation_{side}")
        if isinstance(starved, str) and starved:
            notes.append(f"{what} looks starved at its capacity ({starved})")
    return _claim_row(claim, r, f"{_cell_label(best, '_num')} {best['capacity_qps_num']:.4g} QPS / "
                                f"{_cell_label(best, '_den')} {best['capacity_qps_den']:.4g} QPS", "; ".join(notes))


def capacity_ratio_table(runs: pd.DataFrame, paper: Paper) -> pd.DataFrame:
    """One row per published capacity ratio; paper-config rows only (see paper_config)."""
    runs = capacity_mode(runs)
    usable = runs[paper_config(runs, paper)] if not runs.empty else runs
    return pd.DataFrame([capacity_ratio_row(usable, c) for c in paper.capacity_ratios], columns=COMPARISON_COLUMNS)


def _describe(sel: Selector) -> str:
    return ", ".join(f"{k}={'|'.join(v) if isinstance(v, tuple) else v}" for k, v in sel.items())


def common_qps(probes: pd.DataFrame, group: str, must_pass: tuple[str, ...] = ()) -> float | None:
    """The highest rate probed by every `group` value, preferring rates all of `must_pass` passed.

    Why: latencies of two schedulers (or deployments) are only comparable at one load, and the
    capacity searches of different schedulers share the rates of their bracketing phase
    (start_qps x 2^k), so one usually exists. Without a passing common rate, the highest common one.
    """
    groups = list(probes[group].unique())
    if not groups:
        return None
    rates = set.intersection(*(set(probes.loc[probes[group] == g, "qps"]) for g in groups))
    if not rates:
        return None
    passing = [q for q in rates if all(probes[(probes[group] == g) & (probes["qps"] == q)]["passed"].all()
                                        for g in must_pass if g in groups)]
    return max(passing) if passing and must_pass else max(rates)


def _all_passed(probes: pd.DataFrame, qps: float) -> bool:
    return bool(probes.loc[probes["qps"] == qps, "passed"].all())


def latency_ratio_row(probes: pd.DataFrame, claim: RatioClaim) -> dict:
    num, den, missing = _sides(probes, claim)
    # Pair runs (not probes) on the context the selectors agree on, then take the newest pair.
    cols = ["run_dir", "run", *_pair_columns(claim)]
    runs = _pairs(num[cols].drop_duplicates(), den[cols].drop_duplicates(), claim)  # empty when a side is
    if runs.empty:
        return _claim_row(claim, math.nan, "", missing or NO_PAIR)
    # Newest pair first; a pair with a rate both sides passed beats one compared under overload.
    runs = runs.assign(_newest=[max(a, b) for a, b in zip(runs["run_num"], runs["run_den"])])
    chosen = None
    for _, pick in runs.sort_values("_newest", ascending=False).iterrows():
        n = num[num["run_dir"] == pick["run_dir_num"]].assign(_side="num")
        d = den[den["run_dir"] == pick["run_dir_den"]].assign(_side="den")
        both = pd.concat([n, d], ignore_index=True)
        q = common_qps(both, "_side", must_pass=("num", "den"))
        if q is not None and (chosen is None or _all_passed(both, q)):
            chosen = (n, d, q)
            if _all_passed(both, q):
                break
    if chosen is None:
        return _claim_row(claim, math.nan, "", "the two sides share no probed rate")
    num, den, q = chosen
    vn = float(num.loc[num["qps"] == q, claim.metric].iloc[0])
    vd = float(den.loc[den["qps"] == q, claim.metric].iloc[0])
    r = vn / vd if vd > 0 else math.inf
    a, b = num.iloc[0], den.iloc[0]
    return _claim_row(claim, r, f"{claim.metric} at {q:.4g} QPS: {a['model']} {a['parallel']} {a['scheduler']} {vn:.4g} s / "
                                f"{b['model']} {b['parallel']} {b['scheduler']} {vd:.4g} s")


def latency_ratio_table(probes: pd.DataFrame, paper: Paper) -> pd.DataFrame:
    return pd.DataFrame([latency_ratio_row(probes, c) for c in paper.latency_ratios], columns=COMPARISON_COLUMNS)


TABLE4_COLUMNS = ("dataset", "scheduler", "metric", "qps", "published", "reproduced", "ratio", "tolerance",
                  "within", "run", "note")
TABLE4_METRICS = ("ttft_p50_s", "tbt_p99_s")


def ablation_probes(probes: pd.DataFrame, t4: Table4) -> pd.DataFrame:
    """Probes of the newest run per dataset that ran all three ablation schedulers on Table 4's deployment.

    Fixed-rate runs (`search.fixed_qps`, the paper's setting: one load, 128 requests) are preferred
    over capacity searches, whose probes are read at a common rate.
    """
    if probes.empty:
        return probes
    p = probes[(probes["model"] == t4.model) & (probes["parallel"] == t4.parallel)
               & probes["scheduler"].isin(ABLATION_SCHEDULERS)]
    complete = p.groupby(["run_dir", "dataset"])["scheduler"].transform("nunique") == len(ABLATION_SCHEDULERS)
    p = p[complete]
    if p.empty:
        return p
    p = p.assign(_fixed=(p["mode"] == "fixed_rate").astype(int))
    best = (p[["run_dir", "run", "dataset", "_fixed"]].drop_duplicates()
            .sort_values(["_fixed", "run"]).groupby("dataset").tail(1))
    return p.merge(best[["run_dir", "dataset"]], on=["run_dir", "dataset"]).drop(columns="_fixed")


def table4_frame(probes: pd.DataFrame, paper: Paper) -> pd.DataFrame:
    """Long table: one row per Table 4 number (dataset x scheduler x metric), published vs ours."""
    t4 = paper.table4
    ab = ablation_probes(probes, t4)
    rows = []
    for pub in t4.rows:
        d = ab[ab["dataset"] == pub.dataset] if not ab.empty else ab
        q = common_qps(d, "scheduler", must_pass=("sarathi",)) if not d.empty else None
        for metric in TABLE4_METRICS:
            published = getattr(pub, metric)
            row = {"dataset": pub.dataset, "scheduler": pub.scheduler, "metric": metric, "qps": q,
                   "published": published, "reproduced": float("nan"), "ratio": float("nan"),
                   "tolerance": t4.tolerance.describe(), "within": None, "run": "", "note": ""}
            if q is None:
                row["note"] = "no ablation run (hybrid_only, chunked_only, sarathi) for this dataset"
            else:
                hit = d[(d["scheduler"] == pub.scheduler) & (d["qps"] == q)].iloc[0]
                v = float(hit[metric])
                notes = []
                if pub.scheduler == "sarathi" and hit["token_budget"] != t4.token_budget:
                    notes.append(f"sarathi token budget {hit['token_budget']:g}, paper {t4.token_budget}")
                if hit["num_requests"] != t4.num_requests:
                    notes.append(f"{hit['num_requests']} requests, paper {t4.num_requests}")
                row.update(reproduced=v, ratio=v / published, within=t4.tolerance.within(published, v),
                           run=f"{hit['experiment']}/{hit['run']}", note="; ".join(notes))
            rows.append(row)
    return pd.DataFrame(rows, columns=TABLE4_COLUMNS)


def table4_orderings(t4: pd.DataFrame) -> pd.DataFrame:
    """Does the reproduced ranking of the three schedulers match the paper's, per dataset and metric?

    The paper's point is qualitative (hybrid-only: best TTFT, worst TBT; chunked-only: the reverse;
    both: close to the best of each), so the ranking is checked even where values are off.
    """
    rows = []
    for (dataset, metric), g in t4.groupby(["dataset", "metric"], sort=False):
        if g["reproduced"].isna().any():
            continue
        pub = list(g.sort_values("published")["scheduler"])
        ours = list(g.sort_values("reproduced")["scheduler"])
        rows.append({"dataset": dataset, "metric": metric, "published_order": " < ".join(pub),
                     "reproduced_order": " < ".join(ours), "same": pub == ours})
    return pd.DataFrame(rows, columns=["dataset", "metric", "published_order", "reproduced_order", "same"])
