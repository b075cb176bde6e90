"""Every capacity cell the reports draw: the cells of each study that reads the shared capacity
runs (its `load` is `study.capacity_runs`), in registry order. `settings.judge` places a run by
these cells; `figure=all` runs the missing ones (with the other studies' cells)."""
from __future__ import annotations

from harness.analysis.study import Cell, lazy


def paper_matrix(include_extras: bool = True) -> tuple[Cell, ...]:
    """The capacity cells; without `include_extras`, the Sarathi-Serve paper's main cells only.
    The registry is read at run time (`lazy`, as every study's functions are): the shared modules
    sit below the studies, and a study's modules import them."""
    cells = lazy("harness.analysis.studies:capacity_cells")()
    return tuple(c for c in cells if include_extras or c.group == "main")
