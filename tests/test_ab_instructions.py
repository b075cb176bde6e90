"""benchmarks/ab_instructions.py refuses what it cannot compare in one line, exit 2."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_an_unknown_revision_is_one_line_and_exit_2():
    out = subprocess.run([sys.executable, "benchmarks/ab_instructions.py", "no-such-revision-xyz", "HEAD"],
                         cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and ("not a revision" in lines[0] or "valgrind" in lines[0]), out.stderr
