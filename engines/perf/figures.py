"""Moved: the performance model's figures are drawn by `harness.analysis.perf_model.perf_figures` from the
numbers `engines.perf.queries` returns (engines never imports the harness)."""
import sys

if __name__ == "__main__":
    print("engines.perf.figures has moved: run `python -m harness.analysis.perf_model.perf_figures out_dir=OUT_DIR`", file=sys.stderr)
    raise SystemExit(2)
