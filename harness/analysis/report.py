"""figures/REPORT.md: every figure, and the published numbers beside the reproduced ones.

`write_report(results_dir, figures_dir)` is the one entry point: it loads the saved results,
builds the figures (skipping, with the reason, those whose results are missing), and writes the
markdown. Nothing is re-run.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import pandas as pd

from harness.analysis import tables
from harness.analysis.compare import capacity_ratio_table, latency_ratio_table, table4_frame, table4_orderings
from harness.analysis.figures import FigureOutcome, Inputs, build_figures, load_inputs
from harness.analysis.cost import matrix_cost_text
from harness.analysis.headline import headline_markdown
from harness.analysis.paper import PAPER_FILE
from harness.analysis.pd_figs import distserve_check, distserve_markdown, pd_markdown, pd_table
from harness.analysis.prefix_figs import prefix_answer, prefix_markdown, prefix_table
from harness.analysis.perf_facts import perf_fact_table
from harness.results.store import provenance

REPORT_NAME = "REPORT.md"


def _rel(path: Path, start: Path) -> str:
    return Path(os.path.relpath(path, start)).as_posix()


def _figures_section(outcomes: tuple[FigureOutcome, ...], figures_dir: Path) -> list[str]:
    out = ["## Figures", ""]
    if not outcomes:
        return out + ["Not drawn in this file (its tables only): `python -m harness report results_dir=...` draws every "
                      "figure of these runs into figures/ and writes figures/REPORT.md beside them.", ""]
    for o in outcomes:
        out.append(f"### {o.title}")
        out.append("")
        if o.path is None:
            out.append(f"_Skipped: {o.skipped}._")
        else:
            out.append(f"![{o.title}]({_rel(o.path, figures_dir)})")
            if o.caption:
                out += ["", o.caption]
        out.append("")
    return out


def _score(df: pd.DataFrame) -> str:
    judged = df["within"].dropna()
    return f"{int(judged.astype(bool).sum())} of {len(judged)} reproduced numbers within tolerance" + (
        f", {len(df) - len(judged)} without results" if len(df) > len(judged) else "")


def _perf_figures_section(paths: list[Path], figures_dir: Path) -> list[str]:
    if not paths:
        return []
    out = ["## Performance-model figures", "",
           "Computed from the analytical model (engines/perf), not from runs: what one iteration costs.", ""]
    from harness.analysis.perf_figures import CAPTIONS

    for p in paths:
        title = p.stem.removeprefix("perf_").replace("_", " ")
        out += [f"### {title}", ""] + ([CAPTIONS[p.stem], ""] if p.stem in CAPTIONS else [])
        out += [f"![{title}]({_rel(p, figures_dir)})", ""]
    return out


def _short(commit) -> str:
    return str(commit)[:10] if isinstance(commit, str) and commit else "unknown"


def _provenance_section(inputs: Inputs, head_commit: str | None) -> list[str]:
    """Which runs the report drew, where each came from, and which it left out and why."""
    runs, out = inputs.runs, ["## Runs used", ""]
    if runs.empty and inputs.left_out.empty:
        return []
    own = runs[runs["results_from"] != str(inputs.reference_dir)] if inputs.reference_dir else runs
    ref = runs.drop(own.index)
    if own.empty:
        out.append(f"- No run of yours in `{inputs.results_dir}` is drawn.")
    else:
        off = own.loc[own["settings"] != "", "run_dir"].nunique()
        out.append(f"- {own['run_dir'].nunique()} run(s) from `{inputs.results_dir}`" + (
            f"; {off} of them **not at the paper's settings** (included on request, marked ✱)." if off
            else ", every one at the paper's settings."))
    if not ref.empty:
        commits = sorted({_short(c) for c in ref["git_commit"]})
        line = (f"- {ref['run_dir'].nunique()} cell(s) without a run of yours at the paper's settings are drawn from the "
                f"reference runs in `{inputs.reference_dir}` (commit {', '.join(commits)})")
        if head_commit and any(not head_commit.startswith(c) for c in commits if c != "unknown"):
            line += (f", **older than this checkout ({_short(head_commit)})**: re-run a cell (`python -m harness "
                     "experiment=...`) to draw it from today's code")
        out.append(line + ".")
    if not inputs.left_out.empty:
        lo = inputs.left_out.drop_duplicates("run_dir")
        out += [f"- {len(lo)} run(s) left out, not at the paper's settings (`include_other=true` draws them, marked):", ""]
        out += [tables.markdown([(r["experiment"], r["run"], r["settings"]) for _, r in lo.iterrows()],
                                ("experiment", "run", "why left out"))]
    own_commits = sorted({_short(c) for c in own["git_commit"]})
    if len(own_commits) > 1:
        out.append(f"- Your runs come from {len(own_commits)} commits ({', '.join(own_commits)}).")
    return out + [""]


def render_report(inputs: Inputs, outcomes: tuple[FigureOutcome, ...], figures_dir: Path,
                  perf_figures: list[Path] | None = None, head_commit: str | None = None,
                  stamp: bool = True) -> str:
    """The markdown text (pure: inputs and figure outcomes in, text out; `stamp`: say when)."""
    paper = inputs.paper
    runs = inputs.runs
    caps = capacity_ratio_table(runs, paper)
    lats = latency_ratio_table(inputs.probes, paper)
    t4 = table4_frame(inputs.probes, paper)
    lines = [
        "# Sarathi-Serve reproduction report",
        "",
        f"Results: `{inputs.results_dir}` ({runs['run_dir'].nunique() if not runs.empty else 0} runs, "
        f"newest per cell){', generated ' + time.strftime('%Y-%m-%d %H:%M:%S') if stamp else ''}. Published numbers: "
        f"`{_rel(PAPER_FILE, PAPER_FILE.parents[2])}` ({paper.title}, OSDI'24). Figures and tables "
        "are built from saved results only; nothing here re-runs an experiment.",
        "",
    ]
    if runs.empty:
        lines += ["**No finished runs found.** Run e.g. `python -m harness experiment=yi34b_tp2_strict`.", ""]
    lines += _provenance_section(inputs, head_commit)
    # Capacity searches only: Table 4's fixed-rate runs use 128 requests, as the paper does.
    small = runs[(runs["num_requests"] < 2048) & (runs["mode"] != "fixed_rate")] if not runs.empty else runs
    if not small.empty:
        lines += [f"Note: {small['run_dir'].nunique()} capacity search(es) used fewer than the paper's 2048 requests per probe "
                  f"(as few as {int(small['num_requests'].min())}); their capacities are noisier.", ""]
    lines += _figures_section(outcomes, figures_dir)
    lines += _perf_figures_section(perf_figures or [], figures_dir)
    lines += ["## Paper vs reproduced", "",
              "Ratio = reproduced / published. Tolerances are ours (data/paper/sarathi_serve_osdi24.yaml): "
              "the performance model is built from hardware specs and never fitted to these numbers.", "",
              "### Headline (README.md quotes this table)", "",
              "Sarathi-Serve's capacity over each baseline on each deployment's strict sharegpt cell; the paper's "
              "number where it publishes one for that cell, or \"up to\" on the cell where ours is highest when it "
              "publishes a maximum (harness/analysis/headline.py; the capacity figure labels its bars the same way).", "",
              headline_markdown(runs, paper), "",
              f"### Capacity ratios (Sarathi-Serve / baseline) — {_score(caps)}", "",
              tables.comparison_markdown(caps), ""]
    if not lats.empty:
        lines += [f"### Latency ratios — {_score(lats)}", "", tables.comparison_markdown(lats), ""]
    lines += [f"### Table 4: hybrid batching and chunked prefills (Yi-34B TP2) — {_score(t4)}", "",
              paper.table4.note, "", tables.table4_markdown(t4), ""]
    orders = table4_orderings(t4)
    if not orders.empty:
        lines += ["Ranking of the three schedulers (the paper's qualitative claim):", "",
                  tables.orderings_markdown(orders), ""]
    facts = perf_fact_table(paper.perf_facts)
    lines += [f"### Operator-level facts (performance model, not a run) — {_score(facts)}", "",
              tables.perf_facts_markdown(facts), ""]
    if not inputs.clusters.empty:
        lines += ["## Beyond the paper: one pool or prefill and decode apart", "",
                  "Capacity (QPS) of each deployment's four instances' GPUs, colocated or split (fig17). "
                  "A criterion the colocated schedulers and the splits are both judged by; the winner per row.", "",
                  pd_markdown(pd_table(inputs.clusters)), "",
                  "### A published disaggregation result: DistServe (OSDI'24) Fig. 8, chatbot, OPT-13B", "",
                  "Their settings (data/paper/distserve_osdi24.yaml): one 8x A100-SXM node, TTFT 0.25 s and TPOT "
                  "0.1 s per request, 90 % attainment, rates per GPU; openchat_sharegpt4 lengths cut at 2,047 tokens "
                  "stand in for their ShareGPT-v3 prompts.", "",
                  distserve_markdown(distserve_check(runs, inputs.clusters)), ""]
    cost = matrix_cost_text(inputs.probes)
    if cost:
        lines += ["## What the paper's matrix costs, live", "",
                  "From these searches' own probes (harness/analysis/cost.py): a live probe lasts as long as the "
                  "simulated one took to serve its requests, first arrival to last token, on the deployment's GPUs: "
                  + cost, ""]
    if not inputs.prefix.empty:
        table = prefix_table(inputs.prefix, inputs.prefix_probes)
        lines += ["## Beyond the paper: conversations, agents and prefix caching", "",
                  "Capacity (QPS) under the paper's criterion, per workload, SLO and prefix cache (fig18): "
                  "Sarathi-Serve at each token budget, vLLM and Orca, Sarathi-Serve's best over each, and the share "
                  "of prompt tokens the cache held at Sarathi-Serve's capacity.", "",
                  prefix_markdown(table), "", prefix_answer(table), ""]
    if not runs.empty:
        lines += ["## Every capacity result read", "",
                  "Beside the paper's criterion, at each capacity probe: its P99 TTFT and the requests it completed "
                  "per second. A probe that passes the criterion while completing fewer than half the requests per "
                  "second that arrive, or with a P99 TTFT over a minute, is marked as looking starved "
                  "(harness/starvation.py); its capacity stays the criterion's.", "",
                  tables.capacity_markdown(runs), ""]
    return "\n".join(lines)


def tables_report(results_dir: str | Path, inputs: Inputs | None = None) -> str:
    """The report of `results_dir` without figures or a time: what results/reference/REPORT.md
    holds (committed; it changes only when the reference runs do)."""
    inputs = inputs if inputs is not None else load_inputs(results_dir)
    text = render_report(inputs, (), Path(results_dir), None, None, stamp=False)
    from harness.analysis.sarathi23 import report as sarathi23  # the first Sarathi paper's section, as write_report

    drawn, study = sarathi23.load_study(results_dir, None)
    return text + "\n" + "\n".join(sarathi23.section(drawn, study, (), Path(results_dir), results_dir))


def write_report(results_dir: str | Path = "results", figures_dir: str | Path = "figures",
                 paper_path: str | Path = PAPER_FILE, perf_figures: bool = True,
                 reference_dir: str | Path | None = None, include_other: bool = False) -> Path:
    """Build figures/*.png and figures/REPORT.md from results_dir (plus, with `perf_figures`, the
    performance model's own figures under figures/perf/). Cells missing there come from
    `reference_dir`; runs not at the paper's settings are left out unless `include_other`.
    Returns the report's path."""
    from harness.analysis.perf_figures import save_all

    figures_dir = Path(figures_dir)
    figures_dir.mkdir(parents=True, exist_ok=True)
    inputs = load_inputs(results_dir, paper_path, reference_dir, include_other)
    outcomes = build_figures(inputs, figures_dir)
    perf_paths = save_all(figures_dir / "perf") if perf_figures else []
    text = render_report(inputs, outcomes, figures_dir, perf_paths, provenance()["git_commit"])
    # The first Sarathi paper's section (harness/analysis/sarathi23): its own runs, figures and table.
    from harness.analysis.sarathi23 import report as sarathi23

    drawn, study = sarathi23.load_study(results_dir, reference_dir)
    text += "\n" + "\n".join(sarathi23.section(drawn, study, sarathi23.build(study, figures_dir), figures_dir, results_dir))
    # Table 4 alone as well: it is the one table people paste elsewhere.
    (figures_dir / "table4.md").write_text(tables.table4_markdown(table4_frame(inputs.probes, inputs.paper)) + "\n")
    path = figures_dir / REPORT_NAME
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # a reader never sees half a report
    return path
