"""Figures and tables from saved results only (never by re-running), and the paper comparison.

Entry points:
  harness.analysis.report.write_report(results_dir, figures_dir) -> Path    figures/*.png + REPORT.md
  harness.analysis.figures.build_figures(load_inputs(results_dir), figures_dir)
  harness.analysis.loader.load_runs / load_probes / load_results / load_requests / load_token_times
  harness.analysis.drift.compare(current, reference, Tolerances()) -> DriftReport
  python -m harness.analysis [results_dir=results] [figures_dir=figures]

Submodules import matplotlib/seaborn lazily through `style`; importing this package is cheap.
"""
