"""The contract every study of the analysis layer keeps: a folder under harness/analysis/ with one
`Study` in its `__init__.py`, and one line in harness/analysis/studies.py.

A study is its cells (the runs `figure=all` makes sure exist), how it loads them (from saved
results only), its figures (`FigureSpec`s drawn from what it loaded) and its part of
figures/REPORT.md (`Part`s: lines, and where in the report's `OUTLINE` they go; a new study's part
goes at the end). What every study shares stays beside this file: the loader, style, the paper's
claims, drift and trim.

Importing this module (and so studies.py and every study's `__init__`) is cheap: `python -m
harness --help` lists the figures and `figure=NAME` checks a name before anything is drawn, so a
study names its functions as `lazy("module:function")`, imported when first called.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any


def lazy(ref: str) -> Callable[..., Any]:
    """The function `module:name`, imported when first called."""
    module, _, name = ref.partition(":")

    def call(*args, **kwargs):
        return getattr(import_module(module), name)(*args, **kwargs)

    call.__name__ = name
    return call


class MissingResults(Exception):
    """The results needed by a figure are not in the results directory (the message says which)."""


@dataclass(frozen=True)
class Cell:
    """One run of a study's matrix, as `python -m harness` overrides."""
    name: str  # what the run is for
    overrides: tuple[str, ...]
    group: str  # main | extra | pd | sarathi23 | ...


@dataclass(frozen=True)
class FigureSpec:
    name: str  # file stem under figures/
    title: str
    build: Callable[[Any], Any]  # what the study loaded -> Figure (raises MissingResults)
    caption: str = ""  # what to read off the figure, printed under it in the report


# Where a study's lines go in figures/REPORT.md, in order. "figures" is the report's own list of
# every listed study's figures; a study that names no place goes at the end, in registry order.
OUTLINE = ("intro", "figures", "model_figures", "paper", "clusters", "cost", "workloads", "runs", "end")


@dataclass(frozen=True)
class Part:
    lines: tuple[str, ...]
    at: str = "end"  # one of OUTLINE


@dataclass(frozen=True)
class Source:
    """Where the report reads from, and what it loaded once for every study that shares it."""
    results_dir: str | Path  # as the user wrote it (the report prints it)
    reference_dir: Path | None  # where cells missing from results_dir are drawn from
    figures_dir: Path
    capacity: Any  # harness.analysis.figures.Inputs: the capacity runs, loaded once, for the studies that read them
    head_commit: str | None = None  # the checkout's commit, to date the reference runs against
    stamp: bool = True  # say when the report was generated


def capacity_runs(source: Source) -> Any:
    """The default `load`: the capacity runs every capacity study shares (figures.load_inputs)."""
    return source.capacity


@dataclass(frozen=True)
class Study:
    name: str  # its folder under harness/analysis/
    cells: Callable[[], Sequence[Cell]] = tuple  # the runs figure=all runs when missing (none)
    load: Callable[[Source], Any] = capacity_runs  # saved results -> what its figures and parts read
    figures: tuple[FigureSpec, ...] = ()  # figure=NAME draws one; figure=all every one
    parts: Callable[[Any, tuple, Source], Sequence[Part]] = lambda *_: ()  # (loaded, its figures' outcomes, source) -> report lines
    listed: bool = True  # its figures listed under the report's "## Figures" (else its parts place them)
    draw: Callable[[Any, Path, tuple[str, ...] | None], tuple] | None = None  # drawing other than its FigureSpecs'
    # The run names (a regex on a run's experiment) its own `load` reads: the shared capacity loader
    # (figures.load_inputs) leaves those runs out of every other study's figures and its left-out list.
    runs: str = ""

    def draw_figures(self, data: Any, figures_dir: str | Path, only: tuple[str, ...] | None = None) -> tuple:
        """Save its figures under figures_dir (those named in `only`); the outcomes, skipped ones with why."""
        if self.draw is not None:
            return tuple(self.draw(data, Path(figures_dir), only))
        build = lazy("harness.analysis.figures:build_figure")
        return tuple(build(s, data, figures_dir) for s in self.figures if only is None or s.name in only)
