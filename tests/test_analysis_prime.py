"""figure=all hands the analysis the cells' configs it composed to run them (settings.prime), so
the report judges its runs without composing the 136 cells again: a primed cell must judge every
run exactly as a freshly composed one does."""
import copy

from omegaconf import OmegaConf

from harness.analysis import settings
from harness.analysis.matrix import paper_matrix
from harness.config import compose


def test_a_primed_cell_judges_as_a_composed_one(monkeypatch):
    monkeypatch.setattr(settings, "_PRIMED", {})
    cell = paper_matrix()[0]
    fresh = settings.composed([cell])[0]
    as_run = OmegaConf.to_container(compose([*cell.overrides, "results_dir=elsewhere", "progress=false"]), resolve=True)
    settings.prime({tuple(cell.overrides): as_run})
    primed = settings.composed([cell])[0]
    assert primed is as_run  # not composed again
    run = copy.deepcopy(fresh)
    assert settings.judged(run, primed) == settings.judged(run, fresh) == ""
    run["search"]["num_requests"] = 7
    assert settings.judged(run, primed) == settings.judged(run, fresh) != ""
