"""figures/REPORT.md's "Sarathi (2023)" section: its figures, the paper-vs-reproduced table built
from data/paper/sarathi_2023.yaml (claims.py), which runs it drew, and every offline run read.
A claim outside its tolerance is marked **not reproduced**, with the YAML's reason where one is
known; a claim whose run is missing says so."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.analysis import tables
from harness.analysis.figures import FigureOutcome
from harness.analysis.sarathi23.claims import CLAIMS_FILE, claim_table, load_claims, pipeline_table, within_count
from harness.analysis.sarathi23.figures import Study
from harness.analysis.sarathi23.matrix import CPU_COSTS
from harness.analysis.sarathi23.runs import StudyRuns, study_runs
from harness.analysis.study import Part, Source


def load_study(results_dir: str | Path, reference_dir: str | Path | None, cells=None) -> tuple[StudyRuns, Study]:
    drawn = study_runs(results_dir, reference_dir, cells)
    return drawn, Study(drawn.runs, load_claims(), drawn)


def load(source: Source) -> Study:
    return load_study(source.results_dir, source.reference_dir)[1]


def parts(study: Study, outcomes: tuple[FigureOutcome, ...], source: Source) -> tuple[Part, ...]:
    return (Part(tuple(section(study.drawn, study, outcomes, source.figures_dir, source.results_dir))),)


# What a row that is not a check says in the verdict column (claims.ROLES).
ROLE_VERDICTS = {"input": "input of the model (not judged)", "shown": "shown (not judged)"}


def claims_markdown(table: pd.DataFrame) -> str:
    rows = [(r.claim, r.source, tables.num(r.published), tables.num(r.reproduced), r.tolerance,
             ROLE_VERDICTS.get(r.role) or tables.verdict(r.within), r.note or "")
            for r in table.itertuples(index=False)]
    return tables.markdown(rows, ("claim", "source", "published", "reproduced", "tolerance", "verdict", "why / note"))


# The README's table of the paper's end-to-end rows (Sec. 5.2): its label, then the gain's and the
# decode speedup's claim ids.
README_ROWS = (("13B, 1K, B 6, P:D 50", "gain_llama13b_1k", "decode_speedup_llama13b_1k"),
               ("13B, 2K, B 6, P:D 50", "gain_llama13b_2k", "decode_speedup_llama13b_2k"),
               ("33B, 1K, B 10, P:D 28", "gain_llama33b_1k", "decode_speedup_llama33b_1k"),
               ("33B, 2K, B 5, P:D 63", "gain_llama33b_2k", "decode_speedup_llama33b_2k"))


def readme_quotes(claims, table: pd.DataFrame) -> tuple[str, str]:
    """What README.md says of this study, from the claim table: the count of checks within tolerance
    and the end-to-end table, paper / ours, a row outside its tolerance marked with it."""
    ok, judged = within_count(table)
    inputs = int((table["role"] == "input").sum())
    rows, rel = table.set_index("id"), {c.id: c.tolerance.rel for c in claims}

    def cell(cid: str) -> str:
        r = rows.loc[cid]
        out = f"{r['published']:.2f}x / {tables.num(r['reproduced'], '.2f')}x"
        return out if r["within"] is None or r["within"] else out + f" (outside {rel[cid] * 100:.0f} %)"

    lines = ["| LLaMA-13B on one RTX A6000 / LLaMA-33B on one A100, chunk 256 | throughput gain: paper / ours "
             "| decode speedup: paper / ours |", "| --- | --- | --- |"]
    lines += [f"| {label} | {cell(gain)} | {cell(speedup)} |" for label, gain, speedup in README_ROWS]
    return f"{ok} of its {judged} checks within tolerance ({inputs} more are inputs of the model", "\n".join(lines)


# What each `perf.cpu_costs` choice of the pipeline study assumes (engines/perf/cpu_costs.py CPU_CHOICES).
CPU_ASSUMES = {
    "engine": "an engine's iteration as run: GPU kernels plus the engine's CPU costs on the last stage (Vidur's "
              "profile of the Sarathi-Serve-era engine: 1.2 ms + 0.1 ms a sequence, and with more than one GPU "
              "2.0 ms + 0.1 ms a sequence for the driver-to-worker hop); the claims above are judged with it",
    "none": "GPU kernels only, as the paper's simulator priced them (its successor Vidur skips CPU overheads "
            "unless asked: vidur/config/config.py skip_cpu_overhead_modeling = True)",
}


def pipeline_markdown(table: pd.DataFrame) -> list[str]:
    rows = [(r["claim"], tables.num(r["published"]), *(tables.num(r[c]) for c in CPU_COSTS)) for _, r in table.iterrows()]
    return ([tables.markdown(rows, ("claim", "published", *(f"perf.cpu_costs={c}" for c in CPU_COSTS))), ""]
            + [f"- `perf.cpu_costs={c}` ({'cells ' + PIPELINE_CELLS + s if s else 'the default'}): {CPU_ASSUMES[c]}."
               for c, s in CPU_COSTS.items()] + [""])


PIPELINE_CELLS = "sarathi23_pipeline*"


def runs_markdown(runs: pd.DataFrame) -> str:
    rows = [(r.experiment, r.scheduler, r.backend, tables.num(r.token_throughput), tables.num(r.makespan_s), tables.num(r.gain),
             tables.num(r.decode_speedup), tables.num(r.hybrid_time_share), tables.num(r.bubble_p50_s))
            for r in runs.sort_values(["experiment", "scheduler"]).itertuples(index=False)]
    return tables.markdown(rows, ("run", "scheduler", "backend", "tokens/s", "completion (s)", "gain", "decode speedup",
                                  "hybrid time", "bubble p50 (s)"))


def section(drawn: StudyRuns, study: Study, outcomes: tuple[FigureOutcome, ...], figures_dir: Path,
            results_dir: str | Path) -> list[str]:
    table = claim_table(study.claims, study.runs)
    ok, judged = within_count(table)
    lines = ["# Sarathi (2023): decode-maximal batching, offline throughput, pipeline bubbles", "",
             "The first Sarathi paper (Agrawal et al., *SARATHI: Efficient LLM Inference by Piggybacking Decodes with "
             "Chunked Prefills*, arXiv 2308.16369) asks for offline throughput and pipeline utilisation, not capacity "
             "under an SLO. Its runs here are offline runs (an arrival with no rate: closed_loop keeps B requests in "
             "flight, at_once has them all waiting at t = 0), one per scheduler, in the same simulator, engine core and "
             "performance model as the Sarathi-Serve study above, with the paper's engine priced as "
             "`perf.stack=sarathi-2023`: its attention from the paper's own operator table (two of its three batches "
             "are the kernel's inputs, shown below as such and not judged; the third is held out). Published numbers: "
             f"`{tables.rel(CLAIMS_FILE, CLAIMS_FILE.parents[2])}`.",
             ""]
    runs = drawn.runs
    if runs.empty:
        lines += ["**No offline runs of this study found.** `python -m harness figure=all` runs them.", ""]
    else:
        own = runs[runs["results_from"] != str(drawn.reference_dir)] if drawn.reference_dir else runs
        lines.append(f"- {own['run_dir'].nunique()} run(s) from `{results_dir}`, every one at its cell's settings.")
        ref = runs.drop(own.index)
        if not ref.empty:
            commits = sorted({str(c)[:10] for c in ref["git_commit"]})
            lines.append(f"- {ref['run_dir'].nunique()} cell(s) drawn from the reference runs in `{drawn.reference_dir}` "
                         f"(commit {', '.join(commits)}).")
        if not drawn.left_out.empty:
            lines += [f"- {len(drawn.left_out)} run(s) left out, not at their cell's settings:", "",
                      tables.left_out_markdown(drawn.left_out, ("run", "directory", "why"))]
        lines.append("")
    for o in outcomes:
        lines += tables.figure_lines(o, figures_dir, "##")
    checks = int((table["role"] == "check").sum())
    inputs = int((table["role"] != "check").sum())
    lines += [f"## Sarathi (2023): paper vs reproduced — {ok} of {judged} checks within tolerance"
              + (f", {checks - judged} without results" if checks > judged else "")
              + (f"; {inputs} published numbers shown, not judged (inputs of the model or unspecified)" if inputs else ""), "",
              "Tolerances are ours, relative, each with its reason; the performance model is never fitted to these numbers. "
              "A row **outside** its tolerance is a published result not reproduced; its note names the experiment that "
              "shows why, or says the cause is not found and what was ruled out.", "", claims_markdown(table), ""]
    lines += ["## Sarathi (2023): the pipeline study with and without the engine's CPU costs", "",
              "The same four published ratios from the same cells run both ways (`perf.cpu_costs`); a missing run is "
              "shown as —.", "", *pipeline_markdown(pipeline_table(study.claims, runs, CPU_COSTS))]
    if not runs.empty:
        lines += ["## Every Sarathi (2023) run drawn", "", runs_markdown(runs), ""]
    return lines
