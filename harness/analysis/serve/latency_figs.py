"""Fig. 1 analog: a generation stall seen in one request's token timeline (vLLM vs Sarathi-Serve),
and P99 TBT vs load from the capacity searches' probes."""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from harness.analysis import style
from harness.analysis.study import MissingResults
from harness.analysis.trim import by_stall
from harness.analysis.loader import load_token_times

PREFERRED_EXPERIMENTS = ("yi34b_tp2_strict", "mistral7b_strict")
PREFERRED_DATASET = "openchat_sharegpt4"


def pick_stall(tokens: pd.DataFrame, baseline: str = "vllm", ours: str = "sarathi") -> tuple[int, float] | None:
    """The request (present under both schedulers) whose baseline timeline has the longest stall."""
    if tokens.empty:
        return None
    a = tokens[tokens["scheduler"] == baseline]
    b = tokens[tokens["scheduler"] == ours]
    common = set(a["request_id"]) & set(b["request_id"])
    a = by_stall(a[a["request_id"].isin(common)])
    return None if a.empty else (int(a["request_id"].iloc[0]), float(a["_gap"].iloc[0]))


def choose_run(runs: pd.DataFrame, baseline: str = "vllm", ours: str = "sarathi", mode: str | None = None) -> pd.Series | None:
    """A run with both schedulers (of `mode` when given), the main job's experiment and dataset first."""
    if runs.empty:
        return None
    if mode is not None:
        runs = runs[runs["mode"] == mode]
    has = runs.groupby("run_dir")["scheduler"].agg(lambda s: {baseline, ours} <= set(s))
    cand = runs[runs["run_dir"].isin(has[has].index) & (runs["scheduler"] == ours)]
    if cand.empty:
        return None
    rank = cand["experiment"].map(lambda e: PREFERRED_EXPERIMENTS.index(e) if e in PREFERRED_EXPERIMENTS else 99)
    other = (cand["dataset"] != PREFERRED_DATASET).astype(int)
    return (cand.assign(_rank=rank, _other=other)
            .sort_values(["_other", "_rank", "run"], ascending=[True, True, False]).iloc[0])


def _panel_timeline(ax, tokens: pd.DataFrame, rid: int, baseline: str, ours: str, same_load: bool) -> None:
    for s in (baseline, ours):
        row = tokens[(tokens["scheduler"] == s) & (tokens["request_id"] == rid)].iloc[0]
        t = np.asarray(row["token_times_s"], dtype=float)
        t = t - t[0]
        load = f"{float(row['qps']):.3g} QPS" + ("" if same_load else ", its capacity")
        ax.step(t, np.arange(1, t.size + 1), where="post", color=style.scheduler_color(s),
                label=f"{style.scheduler_label(s)} ({load})")
        if s == baseline:
            i = int(np.argmax(np.diff(t)))
            # Shade the stall: a band reads at any size, a thin arrow vanishes when the figure is scaled down.
            ax.axvspan(t[i], t[i + 1], color="tab:red", alpha=0.15, lw=0)
            ax.annotate(f"generation stall\n{t[i + 1] - t[i]:.2f} s", xy=((t[i] + t[i + 1]) / 2, i + 1),
                        xytext=(0, -36), textcoords="offset points", fontsize=8, ha="center", va="top",
                        color="tab:red", arrowprops={"arrowstyle": "->", "lw": 1.0, "color": "tab:red"})
    ax.set(xlabel="time since the request's first token (s)", ylabel="output tokens generated",
           title=f"request {rid}: token timeline" + (" (same load)" if same_load else ""))
    ax.legend(fontsize=8, loc="upper left")


def _panel_tbt_vs_load(ax, probes: pd.DataFrame, run: pd.Series) -> None:
    p = probes[probes["run_dir"] == run["run_dir"]] if not probes.empty else probes
    if "seed" in p:
        p = p[p["seed"] == run["seed"]]
    for s in [x for x in style.SCHEDULER_ORDER if x in set(p["scheduler"])]:
        g = p[p["scheduler"] == s].sort_values("qps")
        ax.plot(g["qps"], g["tbt_p99_s"], marker="o", ms=4, color=style.scheduler_color(s), label=style.scheduler_label(s))
    ax.axhline(float(run["slo_tbt_s"]), color="black", ls="--", lw=1, label=f"SLO {float(run['slo_tbt_s']):g} s")
    style.plain_log(ax, "x")
    style.plain_log(ax, "y")
    ax.set(xlabel="load (QPS, log scale)", ylabel="P99 TBT (s, log scale)",
           title=f"P99 TBT vs load: {run['experiment']}")
    ax.legend(fontsize=8)


def fig_stall(runs: pd.DataFrame, probes: pd.DataFrame, baseline: str = "vllm", ours: str = "sarathi") -> Figure:
    """Left: the request with the longest stall under the baseline, its token timeline under both
    schedulers. Right: P99 TBT vs load over every probe of a capacity run of the same cell."""
    # The run whose token times the timeline shows, and whether both schedulers ran at one rate. A
    # fixed-rate run (`search.fixed_qps`) is preferred: a capacity run saves token times only at
    # each scheduler's own capacity, so its two timelines are at different loads.
    fixed = choose_run(runs, baseline, ours, mode="fixed_rate")
    run, same_load = (fixed, True) if fixed is not None else (choose_run(runs, baseline, ours, mode="capacity"), False)
    if run is None:
        raise MissingResults(f"no run with both {baseline} and {ours} (run e.g. experiment=yi34b_tp2_strict, "
                             f"or at one rate: experiment=yi34b_tp2_strict scheduler=[sarathi,vllm] search.fixed_qps=1)")
    tokens, seed = load_token_times(run["run_dir"]), run["seed"]
    if "seed" in tokens and seed is not None and (tokens["seed"] == seed).any():  # saved per seed: the run's own only
        tokens = tokens[tokens["seed"] == seed]
    pick = pick_stall(tokens, baseline, ours)
    if pick is None:
        raise MissingResults(f"{run['experiment']}/{run['run']}: no request with token times under both {baseline} and {ours}")
    cap_runs = runs[(runs["mode"] != "fixed_rate") & (runs["model"] == run["model"]) & (runs["parallel"] == run["parallel"])
                    & (runs["dataset"] == run["dataset"]) & (runs["slo_tbt_s"] == run["slo_tbt_s"])]
    cap = choose_run(cap_runs, baseline, ours)
    fig, axes = style.new_figure(2 if cap is not None else 1, width=5.6, height=4.0)
    _panel_timeline(axes[0][0], tokens, pick[0], baseline, ours, same_load)
    if cap is not None:
        _panel_tbt_vs_load(axes[0][1], probes, cap)
    return style.finish(fig, f"Generation stalls (Fig. 1 analog): {style.MODEL_LABELS.get(run['model'], run['model'])} "
                             f"{style.parallel_label(run['parallel'])}, {style.dataset_label(run['dataset'])}", y=1.02)
