"""The simulator's stepping and timeline, compiled with the engine core though outside engines/
(harness/backends/sim/stepping.py, timeline.py; engines/compiled.MODULES): the same guard holds,
an edited source of theirs runs from its source, and the core with it (one build, all or none)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engines import compiled
from tests.test_compiled_build import _vouched

REPO = Path(__file__).resolve().parent.parent
# The stepping imported first: the guard (engines/__init__.py) is in place before its module is found.
PROBE = "import harness.backends.sim.stepping as s, engines.core.engine as e; print(s.__file__); print(e.__file__)"
SIM = ("harness.backends.sim.stepping", "harness.backends.sim.timeline", "harness.backends.sim.releases",
       "harness.backends.sim.engine_sequence")


def test_the_stepping_and_timeline_are_in_the_build():
    assert set(SIM) <= set(compiled.MODULES)


@pytest.mark.skipif(not compiled.is_built(REPO), reason="this checkout has no compiled build (pip install -e .)")
def test_an_edited_stepping_runs_from_its_source_and_the_core_with_it(tmp_path):
    for package in ("common", "engines", "harness"):
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    for lib in REPO.glob("*__mypyc*"):
        shutil.copy(lib, tmp_path)
    root = _vouched(tmp_path)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SARATHI_HARNESS_")}

    def probe() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", PROBE], cwd=root, env={**clean, "PYTHONPATH": str(root)},
                              capture_output=True, text=True, check=True)

    fresh = probe()
    assert all(Path(f).suffix != ".py" for f in fresh.stdout.split()) and fresh.stderr == ""
    path = compiled.source_path(root, SIM[0])
    path.write_text(path.read_text() + "\nEDITED = True\n")
    stale = probe()
    assert stale.stdout.split() == [str(path), str(root / "engines/core/engine.py")]
    assert "harness/backends/sim/stepping.py changed since the engine core was compiled" in stale.stderr
