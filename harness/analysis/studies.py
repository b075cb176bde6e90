"""The registry of studies: each a folder under harness/analysis/ with a `Study` (study.py) in its
`__init__`. A new study is its folder plus one line here. The order is the report's within each
place of its outline (study.OUTLINE) and the order of the "## Figures" list."""
from __future__ import annotations

from harness.analysis.fleet import STUDY as FLEET
from harness.analysis.pd import STUDY as PD
from harness.analysis.perf_model import STUDY as PERF_MODEL
from harness.analysis.prefix import STUDY as PREFIX
from harness.analysis.sarathi23 import STUDY as SARATHI23
from harness.analysis.serve import STUDY as SERVE
from harness.analysis.study import Cell, FigureSpec, Study, capacity_runs

STUDIES: tuple[Study, ...] = (
    SERVE,  # Sarathi-Serve (OSDI'24): capacity, latency, headline, Table 4
    PD,  # beyond the paper: colocated or prefill/decode apart; DistServe's cell
    PREFIX,  # beyond the paper: conversations, agents, prefix caching
    PERF_MODEL,  # the performance model: its figures and the paper's operator-level facts
    SARATHI23,  # the first Sarathi paper: offline throughput, pipeline bubbles
    FLEET,  # beyond the paper: 8 replicas behind a router, a host KV tier; capacity and GPU-hours a day
)

FIGURES: tuple[FigureSpec, ...] = tuple(f for s in STUDIES for f in s.figures)  # figure=NAME's names


# The order figure=all runs the studies' cells in: the papers' own figures first (Sarathi-Serve, then
# the first Sarathi paper), so a reader of the papers has them early, then the studies beyond them
# with the longest jobs first (RUN_THEN): two jobs run at once, and a run that ends on the fleet's
# ~40-60 s jobs leaves one core idle for up to one of them, where the prefill/decode study's short
# ones fill both to the end (a job's CPU s: `benchmarks/bench_figure_all.py --jobs`; a prefix-caching
# job is a strict/relaxed pair, harness.commands.jobs). Any other study goes after those. The
# report's order is STUDIES' own.
RUN_FIRST = (SERVE, SARATHI23, PERF_MODEL)
RUN_THEN = (PREFIX, FLEET, PD)  # CPU s a job (benchmarks/RESULTS.md, issue 54): 34-65, 37-66, 2-15


def run_order() -> tuple[tuple[Study, Cell], ...]:
    """Every study's cells as (study, cell), in the order figure=all runs them (RUN_FIRST, RUN_THEN)."""
    ordered = [*RUN_FIRST, *RUN_THEN, *(s for s in STUDIES if s not in RUN_FIRST + RUN_THEN)]
    return tuple((s, c) for s in ordered for c in s.cells())


def study_of(figure: str) -> Study | None:
    """The study that draws `figure`, if any."""
    return next((s for s in STUDIES if any(f.name == figure for f in s.figures)), None)


def capacity_cells() -> tuple[Cell, ...]:
    """Every cell of the studies that read the shared capacity runs (their `load` is
    study.capacity_runs), in registry order: what settings.judge places a capacity run by."""
    return tuple(c for s in STUDIES if s.load is capacity_runs for c in s.cells())


def own_runs() -> str:
    """The run names the studies with their own runs read themselves (Study.runs, one regex), which
    the shared capacity loader leaves out; "" when none."""
    return "|".join(f"(?:{s.runs})" for s in STUDIES if s.runs)
