"""The performance model's parts of figures/REPORT.md: its own figures (figures/perf/, from
engines.perf, not from runs) and the paper's operator-level facts against it."""
from __future__ import annotations

from pathlib import Path

from harness.analysis import tables
from harness.analysis.figures import FigureOutcome
from harness.analysis.paper import Paper
from harness.analysis.perf_model.perf_facts import perf_fact_table
from harness.analysis.study import Part, Source


def load(source: Source) -> Paper:
    """The published numbers (their operator-level facts): nothing else is read from results."""
    return source.capacity.paper


def draw(paper: Paper, figures_dir: Path, only: tuple[str, ...] | None = None) -> tuple[FigureOutcome, ...]:
    from harness.analysis.perf_model.perf_figures import CAPTIONS, save_all

    return tuple(FigureOutcome(p.stem, p.stem.removeprefix("perf_").replace("_", " "), p, None, CAPTIONS.get(p.stem, ""))
                 for p in save_all(figures_dir / "perf"))


def perf_figures_section(paths: list[Path], figures_dir: Path) -> list[str]:
    if not paths:
        return []
    out = ["## Performance-model figures", "",
           "Computed from the analytical model (engines/perf), not from runs: what one iteration costs.", ""]
    from harness.analysis.perf_model.perf_figures import CAPTIONS

    for p in paths:
        title = p.stem.removeprefix("perf_").replace("_", " ")
        out += [f"### {title}", ""] + ([CAPTIONS[p.stem], ""] if p.stem in CAPTIONS else [])
        out += [f"![{title}]({tables.rel(p, figures_dir)})", ""]
    return out


def parts(paper: Paper, outcomes: tuple[FigureOutcome, ...], source: Source) -> tuple[Part, ...]:
    facts = perf_fact_table(paper.perf_facts)
    return (Part(tuple(perf_figures_section([o.path for o in outcomes], source.figures_dir)), "model_figures"),
            Part((f"### Operator-level facts (performance model, not a run) — {tables.score(facts)}", "",
                  tables.perf_facts_markdown(facts), ""), "paper"))
