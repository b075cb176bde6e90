"""python -m harness.analysis [RESULTS=results] [FIGURES=figures]: write figures/*.png and REPORT.md."""
from __future__ import annotations

import sys

from harness.analysis.report import write_report


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args) or len(args) > 2:
        print(__doc__.strip())
        return 0 if len(args) <= 2 else 2
    results = args[0] if args else "results"
    figures = args[1] if len(args) > 1 else "figures"
    path = write_report(results, figures)
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
