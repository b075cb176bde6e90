"""The layering rules of ARCHITECTURE.md hold: import-linter checks the contracts in pyproject.toml."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_engines_import_nothing_from_the_harness():
    # The first contract in words: engines (and common) usable without the harness installed.
    code = "import sys, engines.perf, engines.core, engines.schedulers, engines.server.app; " \
           "print(sorted(m for m in sys.modules if m == 'harness' or m.startswith('harness.')))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_no_source_file_over_400_lines():
    long = []
    for path in [*ROOT.glob("engines/**/*.py"), *ROOT.glob("harness/**/*.py"), *ROOT.glob("common/**/*.py")]:
        n = len(path.read_text().splitlines())
        if n > 400:
            long.append(f"{path.relative_to(ROOT)}: {n}")
    assert not long, long
