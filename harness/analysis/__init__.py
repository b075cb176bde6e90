"""Figures and tables from saved results only (never by re-running), and the paper comparison.

The layer is a set of studies (docs/analysis.md): one folder each (`serve`, `pd`, `prefix`,
`perf_model`, `sarathi23`), each a `study.Study` listed once in `studies.STUDIES`; the modules
beside them are shared (loader, figures, style, paper, tables, settings, matrix, drift, trim).

Entry points:
  harness.analysis.report.write_report(results_dir, figures_dir) -> Path    figures/*.png + REPORT.md
  harness.analysis.report.tables_report(results_dir) -> str                  the same text, no figures
  harness.analysis.figures.load_inputs(results_dir)                          the capacity runs, once
  harness.analysis.loader.load_runs / load_probes / load_results / load_requests / load_token_times
  harness.analysis.drift.compare(current, reference, Tolerances()) -> DriftReport
  python -m harness.analysis [results_dir=results] [figures_dir=figures]

Submodules import matplotlib/seaborn lazily through `style`; importing this package is cheap.
"""
