"""The Sarathi-Serve study's parts of figures/REPORT.md: the title and which runs it drew, the
paper-vs-reproduced tables (headline, capacity and latency ratios, Table 4), what its matrix
costs live, and every capacity result read; and its drawing (its figures and table4.md)."""
from __future__ import annotations

import time
from pathlib import Path

from harness.analysis import tables
from harness.analysis.figures import Inputs, build_figure
from harness.analysis.paper import PAPER_FILE
from harness.analysis.serve import FIGURES
from harness.analysis.serve.compare import capacity_ratio_table, latency_ratio_table, table4_frame, table4_orderings
from harness.analysis.serve.cost import matrix_cost_text
from harness.analysis.serve.headline import headline_markdown
from harness.analysis.study import Part, Source


def draw(inputs: Inputs, figures_dir: Path, only: tuple[str, ...] | None = None) -> tuple:
    outcomes = tuple(build_figure(s, inputs, figures_dir) for s in FIGURES if only is None or s.name in only)
    if only is None:  # Table 4 alone as well: it is the one table people paste elsewhere.
        (figures_dir / "table4.md").write_text(tables.table4_markdown(table4_frame(inputs.probes, inputs.paper)) + "\n")
    return outcomes


def _short(commit) -> str:
    return str(commit)[:10] if isinstance(commit, str) and commit else "unknown"


def provenance_lines(inputs: Inputs, head_commit: str | None) -> list[str]:
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


def intro(inputs: Inputs, source: Source) -> list[str]:
    runs = inputs.runs
    lines = [
        "# Sarathi-Serve reproduction report",
        "",
        f"Results: `{inputs.results_dir}` ({runs['run_dir'].nunique() if not runs.empty else 0} runs, "
        f"newest per cell){', generated ' + time.strftime('%Y-%m-%d %H:%M:%S') if source.stamp else ''}. Published numbers: "
        f"`{tables.rel(PAPER_FILE, PAPER_FILE.parents[2])}` ({inputs.paper.title}, OSDI'24). Figures and tables "
        "are built from saved results only; nothing here re-runs an experiment.",
        "",
    ]
    if runs.empty:
        lines += ["**No finished runs found.** Run e.g. `python -m harness experiment=yi34b_tp2_strict`.", ""]
    lines += provenance_lines(inputs, source.head_commit)
    # Capacity searches only: Table 4's fixed-rate runs use 128 requests, as the paper does.
    small = runs[(runs["num_requests"] < 2048) & (runs["mode"] != "fixed_rate")] if not runs.empty else runs
    if not small.empty:
        lines += [f"Note: {small['run_dir'].nunique()} capacity search(es) used fewer than the paper's 2048 requests per probe "
                  f"(as few as {int(small['num_requests'].min())}); their capacities are noisier.", ""]
    return lines


def paper_lines(inputs: Inputs) -> list[str]:
    paper, runs = inputs.paper, inputs.runs
    caps = capacity_ratio_table(runs, paper)
    lats = latency_ratio_table(inputs.probes, paper)
    t4 = table4_frame(inputs.probes, paper)
    lines = ["## Paper vs reproduced", "",
              "Ratio = reproduced / published. Tolerances are ours (data/paper/sarathi_serve_osdi24.yaml): "
              "the performance model is built from hardware specs and never fitted to these numbers.", "",
              "### Headline (README.md quotes this table)", "",
              "Sarathi-Serve's capacity over each baseline on each deployment's strict sharegpt cell; the paper's "
              "number where it publishes one for that cell, or \"up to\" on the cell where ours is highest when it "
              "publishes a maximum (harness/analysis/serve/headline.py; the capacity figure labels its bars the same way).", "",
              headline_markdown(runs, paper), "",
              f"### Capacity ratios (Sarathi-Serve / baseline) — {tables.score(caps)}", "",
              tables.comparison_markdown(caps), ""]
    if not lats.empty:
        lines += [f"### Latency ratios — {tables.score(lats)}", "", tables.comparison_markdown(lats), ""]
    lines += [f"### Table 4: hybrid batching and chunked prefills (Yi-34B TP2) — {tables.score(t4)}", "",
              paper.table4.note, "", tables.table4_markdown(t4), ""]
    orders = table4_orderings(t4)
    if not orders.empty:
        lines += ["Ranking of the three schedulers (the paper's qualitative claim):", "",
                  tables.orderings_markdown(orders), ""]
    return lines


def parts(inputs: Inputs, outcomes: tuple, source: Source) -> tuple[Part, ...]:
    out = [Part(tuple(intro(inputs, source)), "intro"), Part(tuple(paper_lines(inputs)), "paper")]
    cost = matrix_cost_text(inputs.probes)
    if cost:
        out.append(Part(("## What the paper's matrix costs, live", "",
                         "From these searches' own probes (harness/analysis/serve/cost.py): a live probe lasts as long as the "
                         "simulated one took to serve its requests, first arrival to last token, on the deployment's GPUs: "
                         + cost, ""), "cost"))
    if not inputs.runs.empty:
        out.append(Part(("## Every capacity result read", "",
                         "Beside the paper's criterion, at each capacity probe: its P99 TTFT and the requests it completed "
                         "per second. A probe that passes the criterion while completing fewer than half the requests per "
                         "second that arrive, or with a P99 TTFT over a minute, is marked as looking starved "
                         "(harness/starvation.py); its capacity stays the criterion's.", "",
                         tables.capacity_markdown(inputs.runs), ""), "runs"))
    return tuple(out)
