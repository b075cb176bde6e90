"""The analysis layer as studies (harness/analysis/study.py, studies.py): a new study or figure is
one folder plus one registry line, and the report places every study's parts by the outline."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.analysis.figures import load_inputs
from harness.analysis.matrix import paper_matrix
from harness.analysis.report import render, source_of
from harness.analysis.studies import FIGURES, STUDIES, capacity_cells, run_order, study_of
from harness.analysis.study import OUTLINE, FigureSpec, Part, Study, capacity_runs


def test_every_figure_has_one_study_and_every_study_a_folder():
    names = [f.name for f in FIGURES]
    assert len(names) == len(set(names))
    assert all(study_of(n).name in {s.name for s in STUDIES} for n in names)
    root = Path(__file__).resolve().parent.parent / "harness" / "analysis"
    assert all((root / s.name / "__init__.py").is_file() for s in STUDIES)


def test_the_capacity_matrix_is_the_capacity_studies_cells_in_order():
    cells = paper_matrix()
    assert cells == capacity_cells() and [c.name for c in cells[:8]] == [c.name for c in paper_matrix(False)]
    owners = [s.name for s in STUDIES if s.load is capacity_runs for _ in s.cells()]
    assert owners[0] == "serve" and owners[-1] == "prefix" and len(cells) == len(owners)
    assert {c.name for c in cells}.isdisjoint(c.name for c in study_of("sarathi23_orca").cells())


def test_figure_all_runs_the_papers_cells_first_and_every_cell_once():
    order = [s.name for s, _ in run_order()]
    papers = {"serve", "sarathi23", "perf_model"}
    first_other = next(k for k, n in enumerate(order) if n not in papers)
    assert set(order[:first_other]) == {"serve", "sarathi23"} and papers.isdisjoint(order[first_other:])
    # beyond the papers, the longest jobs first, the prefill/decode study's short ones last (they fill both cores to the end)
    assert list(dict.fromkeys(order[first_other:])) == ["prefix", "fleet", "pd"]
    assert sorted(c.name for _, c in run_order()) == sorted(c.name for s in STUDIES for c in s.cells())


def _toy(at: str = "end", listed: bool = True) -> Study:
    def draw(data, figures_dir, only):
        from harness.analysis.figures import FigureOutcome

        return (FigureOutcome("toy_fig", "A toy figure", Path(figures_dir) / "toy_fig.png", None, "read it"),)

    return Study("toy", figures=(FigureSpec("toy_fig", "A toy figure", lambda d: None),),
                 parts=lambda data, outcomes, source: (Part(("## A toy study", "", f"{len(outcomes)} figure(s)"), at),),
                 listed=listed, draw=draw)


def test_a_new_study_is_one_registry_line(tmp_path):
    """A study the registry lists is in the report: its figure in the figures list, its part at its place."""
    source = source_of(load_inputs(tmp_path / "none"), tmp_path)
    studies = tuple(s for s in STUDIES if s.name != "sarathi23")
    toy = _toy()
    drawn = {"toy": toy.draw_figures(None, tmp_path)}
    plain = render(source, drawn, studies)
    text = render(source, drawn, (*studies, toy))
    assert "A toy study" not in plain and text.endswith("## A toy study\n\n1 figure(s)")
    figures = text.split("## Figures")[1].split("\n## ")[0]
    assert "### A toy figure" in figures and "![A toy figure](toy_fig.png)" in figures
    assert "A toy figure" not in render(source, drawn, (*studies, _toy(listed=False)))
    early = render(source, drawn, (*studies, _toy(at="intro")))
    assert early.index("## A toy study") < early.index("## Figures")


def test_a_part_at_no_place_of_the_outline_is_refused(tmp_path):
    source = source_of(load_inputs(tmp_path / "none"), tmp_path)
    assert "nowhere" not in OUTLINE
    with pytest.raises(ValueError, match="toy.*nowhere"):
        render(source, {}, (_toy(at="nowhere"),))


def test_the_model_figures_have_their_own_section(tmp_path):
    """The performance model's figures are not runs': its section holds them, the figures list does not."""
    from harness.analysis.figures import FigureOutcome

    source = source_of(load_inputs(tmp_path / "none"), tmp_path)
    studies = tuple(s for s in STUDIES if s.name != "sarathi23")
    tile = FigureOutcome("perf_tile_quantization", "tile quantization", tmp_path / "perf" / "perf_tile_quantization.png")
    text = render(source, {"perf_model": (tile,)}, studies)
    figures = text.split("## Figures")[1].split("\n## ")[0]
    model = text.split("## Performance-model figures")[1].split("\n## ")[0]
    assert "tile quantization" not in figures and "![tile quantization](perf/perf_tile_quantization.png)" in model
    assert text.index("## Figures") < text.index("## Performance-model figures") < text.index("## Paper vs reproduced")
