"""Is a saved run at the paper's settings? Each run's saved config against its paper cell's.

A paper cell (harness.analysis.matrix) is composed with today's presets; a run belongs to the cell
with the same experiment name and dataset, and is *at the paper's settings* when every setting
both configs have agrees. Settings that do not change what is measured (where results go, the
seed, progress, the backend's own knobs) are not compared. A run from an older commit that lacks
a newer key is judged on the keys it has.

`judge(config)` returns "" when the run is at the paper's settings, otherwise why not, in words:
"not a paper cell" or the differing settings with the paper's values ("search.num_requests=256
(paper: 2048)"). Figures leave such runs out unless asked, and the report lists them.
"""
from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from harness.results.config_diff import differences as config_differences
from harness.settings.experiment import HOW_NOT_WHAT

# The name and seed do not make a run another experiment; the backend's knobs (live URL, sim fast-forward) are
# how it ran, recorded with the run, not what, as HOW_NOT_WHAT are.
IGNORED_PREFIXES = ("name", "seed", "backend", "hydra", *HOW_NOT_WHAT)
NOT_A_CELL = "not a paper cell"


def differences(run: Mapping, cell: Mapping) -> tuple[str, ...]:
    """Settings of `run` that differ from `cell`, as "key=value (paper: v)". A scheduler only one
    runs is an extra column of results, not another setting: only shared schedulers' knobs count."""
    return config_differences(run, cell, IGNORED_PREFIXES, other="paper")


def cell_key(config: Mapping) -> tuple[str | None, str | None]:
    return config.get("name"), (config.get("dataset") or {}).get("name")


# Cells' configs composed already in this process, by their overrides (`prime`).
_PRIMED: dict[tuple[str, ...], dict] = {}


def prime(configs: Mapping[tuple[str, ...], dict]) -> None:
    """Hand `composed` configs already composed for these overrides: figure=all composes every
    cell before running it, with only results_dir and progress added (ignored here, IGNORED_PREFIXES),
    and judging its runs would compose all 136 again at the end, on one core (~17 CPU s)."""
    _PRIMED.update(configs)


def composed(cells) -> list[dict]:
    """Each cell's config (anything with `overrides`), composed with today's presets (or primed).
    The one place analysis composes: harness.config registers the whole schema, backends' included."""
    from omegaconf import OmegaConf

    from harness.config import compose

    return [_PRIMED.get(tuple(c.overrides)) or OmegaConf.to_container(compose(list(c.overrides)), resolve=True)
            for c in cells]


def by_name(cells) -> dict[str, dict]:
    """Cell name -> its composed config (today's presets): how a study with its own cells judges its runs."""
    return {c.name: cfg for c, cfg in zip(cells, composed(cells))}


@lru_cache(maxsize=1)
def paper_cell_configs() -> Mapping[tuple, dict]:
    """(experiment name, dataset) -> the composed config of that paper cell, with today's presets."""
    from harness.analysis.matrix import paper_matrix

    return {cell_key(cfg): cfg for cfg in composed(paper_matrix())}


def judged(config: Mapping, cell: Mapping | None, not_a_cell: str = NOT_A_CELL) -> str:
    """"" when `config` is at `cell`'s settings, else why not (`not_a_cell` where it has no cell)."""
    return not_a_cell if cell is None else "; ".join(differences(config, cell))


def judge(config: Mapping, cells: Mapping[tuple, dict] | None = None) -> str:
    """"" when `config` (a run's saved config.yaml) is at its paper cell's settings, else why not."""
    cells = paper_cell_configs() if cells is None else cells
    return judged(config, cells.get(cell_key(config)))
