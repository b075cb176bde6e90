"""The analysis reads saved results and imports no backend, at run time too: writing the report of
the reference results (which judges each run against its paper cell's composed config) leaves no
module of harness.backends, search, planner or commands in `sys.modules`.

It holds because each backend's settings class lives on the settings floor (harness.settings), so
composing a paper cell's config imports no backend."""
from __future__ import annotations

import json
import subprocess
import sys


from harness.paths import ROOT

REPORT = """
import json, sys
from harness.analysis.report import tables_report
tables_report(sys.argv[1])
print(json.dumps(sorted(sys.modules)))
"""
FORBIDDEN = ("harness.backends", "harness.search", "harness.planner", "harness.commands", "harness.loadgen")


def test_the_report_of_saved_results_loads_no_backend() -> None:
    out = subprocess.run([sys.executable, "-c", REPORT, str(ROOT / "results" / "reference")], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert any(m == "harness.analysis.report" for m in loaded)
    bad = sorted(m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))
    assert not bad, f"the report of saved results loads {bad[:12]}{' ...' if len(bad) > 12 else ''}"
