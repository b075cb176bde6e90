"""python -m harness.analysis [results_dir=results] [figures_dir=figures] [tables_only=false]: write
figures/*.png and REPORT.md from saved results (the same as `python -m harness figure=all
run_missing=false`). `tables_only=true` writes RESULTS_DIR/REPORT.md instead: the tables, no
figures and no time, so it changes only when the results do (results/reference/REPORT.md is that,
committed: `python -m harness report results_dir=results/reference tables_only=true`)."""
from __future__ import annotations

import sys
from pathlib import Path

from harness.analysis.report import tables_report, write_report
from harness.overrides import exits_2, options


@exits_2
def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        print(__doc__.strip())
        return 0
    if args and all("=" not in a for a in args) and len(args) <= 2:  # the old spelling: RESULTS [FIGURES]
        print(f"note: {' '.join(args)}: the old spelling; write results_dir=... figures_dir=...", file=sys.stderr)
        args = [f"{k}={v}" for k, v in zip(("results_dir", "figures_dir"), args)]
    opts = options(args, {"results_dir": "results", "figures_dir": "figures", "tables_only": False})
    if opts["tables_only"]:
        path = Path(opts["results_dir"]) / "REPORT.md"
        path.write_text(tables_report(opts["results_dir"]))
        print(f"report: {path}")
        return 0
    print(f"report: {write_report(opts['results_dir'], opts['figures_dir'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
