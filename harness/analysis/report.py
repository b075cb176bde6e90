"""figures/REPORT.md: every study's figures and parts (harness/analysis/studies.py), the published
numbers beside the reproduced ones.

`write_report(results_dir, figures_dir)` is the one entry point: it loads the saved results once
per study, draws each study's figures (skipping, with the reason, those whose results are
missing), and writes the markdown, each study's parts at their place in `study.OUTLINE`. Nothing
is re-run. `tables_report` is the same text without figures or a time.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.analysis import tables
from harness.analysis.figures import FigureOutcome, Inputs, load_inputs
from harness.analysis.paper import PAPER_FILE
from harness.analysis.studies import STUDIES
from harness.analysis.study import OUTLINE, Source, Study
from harness.results.store import provenance

REPORT_NAME = "REPORT.md"


def _figures_section(outcomes: tuple[FigureOutcome, ...], figures_dir: Path) -> list[str]:
    out = ["## Figures", ""]
    if not outcomes:
        return out + ["Not drawn in this file (its tables only): `python -m harness report results_dir=...` draws every "
                      "figure of these runs into figures/ and writes figures/REPORT.md beside them.", ""]
    return out + [line for o in outcomes for line in tables.figure_lines(o, figures_dir)]


def source_of(inputs: Inputs, figures_dir: str | Path, head_commit: str | None = None, stamp: bool = True,
              results_dir: str | Path | None = None) -> Source:
    """The report's source, around capacity runs already loaded (`results_dir`: as the user wrote it)."""
    return Source(inputs.results_dir if results_dir is None else results_dir, inputs.reference_dir, Path(figures_dir),
                  inputs, head_commit, stamp)


def render(source: Source, drawn: Mapping[str, tuple] | None = None, studies: Sequence[Study] = STUDIES,
           loaded: Mapping[str, object] | None = None) -> str:
    """The markdown text (pure but for the studies' loads when `loaded` is None): each study's parts
    at their place in the outline; `drawn`: each study's figure outcomes, by study name."""
    drawn = drawn or {}
    loaded = loaded if loaded is not None else {s.name: s.load(source) for s in studies}
    at: dict[str, list[str]] = {place: [] for place in OUTLINE}
    at["figures"] = _figures_section(tuple(o for s in studies if s.listed for o in drawn.get(s.name, ())),
                                     source.figures_dir)
    for s in studies:
        for part in s.parts(loaded[s.name], drawn.get(s.name, ()), source):
            if part.at not in at:
                raise ValueError(f"study {s.name}: a part at {part.at!r}, not a place of the report (study.OUTLINE)")
            at[part.at].extend(part.lines)
    return "\n".join(line for place in OUTLINE for line in at[place])


def tables_report(results_dir: str | Path, inputs: Inputs | None = None) -> str:
    """The report of `results_dir` without figures or a time: what results/reference/REPORT.md
    holds (committed; it changes only when the reference runs do)."""
    inputs = inputs if inputs is not None else load_inputs(results_dir)
    return render(source_of(inputs, Path(results_dir), None, stamp=False, results_dir=results_dir))


def write_report(results_dir: str | Path = "results", figures_dir: str | Path = "figures",
                 paper_path: str | Path = PAPER_FILE, perf_figures: bool = True,
                 reference_dir: str | Path | None = None, include_other: bool = False) -> Path:
    """Build every study's figures and figures/REPORT.md from results_dir (with `perf_figures`, the
    performance model's own figures under figures/perf/ too). Cells missing there come from
    `reference_dir`; runs not at the paper's settings are left out unless `include_other`.
    Returns the report's path."""
    figures_dir = Path(figures_dir)
    figures_dir.mkdir(parents=True, exist_ok=True)
    inputs = load_inputs(results_dir, paper_path, reference_dir, include_other)
    source = source_of(inputs, figures_dir, provenance()["git_commit"], results_dir=results_dir)
    loaded = {s.name: s.load(source) for s in STUDIES}
    drawn = {s.name: s.draw_figures(loaded[s.name], figures_dir) for s in STUDIES
             if perf_figures or s.name != "perf_model"}
    text = render(source, drawn, STUDIES, loaded)
    path = figures_dir / REPORT_NAME
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # a reader never sees half a report
    return path
