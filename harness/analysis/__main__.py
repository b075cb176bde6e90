"""python -m harness.analysis [results_dir=results] [figures_dir=figures]: write figures/*.png and REPORT.md
from saved results (the same as `python -m harness figure=all run_missing=false`)."""
from __future__ import annotations

import sys

from common.errors import HarnessError
from harness.analysis.report import write_report
from harness.overrides import options


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        print(__doc__.strip())
        return 0
    if args and all("=" not in a for a in args) and len(args) <= 2:  # the old spelling: RESULTS [FIGURES]
        print(f"note: {' '.join(args)}: the old spelling; write results_dir=... figures_dir=...", file=sys.stderr)
        args = [f"{k}={v}" for k, v in zip(("results_dir", "figures_dir"), args)]
    try:
        opts = options(args, {"results_dir": "results", "figures_dir": "figures"})
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"report: {write_report(opts['results_dir'], opts['figures_dir'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
