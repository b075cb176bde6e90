"""The performance model itself, not a run: its figures (`perf_figures`, `fidelity_figure`, under
figures/perf/), the paper's operator-level facts against it (`perf_facts`), its operator fidelity
against measured profiles (`operator_fidelity`, `vidur_points`) and its report parts (`report`)."""
from __future__ import annotations

from harness.analysis.study import Study, lazy

# Drawn from engines.perf, not from saved results: it loads only the published facts, runs no cells;
# its figures have their own section (listed=False), not the runs' figures list.
STUDY = Study("perf_model", load=lazy("harness.analysis.perf_model.report:load"),
              parts=lazy("harness.analysis.perf_model.report:parts"), listed=False,
              draw=lazy("harness.analysis.perf_model.report:draw"))
