"""The compiled engine core (engines/compiled.py, setup.py): a build whose sources changed is never
imported; the modules it names keep compiling."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from engines import compiled

REPO = Path(__file__).resolve().parent.parent
PROBE = "import engines.core.batch as m, engines.core.engine as e; print(m.__file__); print(e.__file__)"


def _tree(tmp_path: Path) -> Path:
    """A copy of the package, with this checkout's build where it has one (the extension modules,
    their shared library at the top and the record)."""
    shutil.copytree(REPO / "engines", tmp_path / "engines", ignore=shutil.ignore_patterns("__pycache__"))
    for lib in REPO.glob("*__mypyc*"):
        shutil.copy(lib, tmp_path)
    return tmp_path


def _vouched(root: Path) -> Path:
    """The copy, its record rewritten for its sources where this checkout's build is stale because a
    source was edited after it (newer than the record; or removed): as a fresh build of the copy would
    write it. The subject is the guard, which compares the record with the sources beside it; the
    extension modules load whatever sources they were built from. A record that disagrees with sources
    older than it (a fresh build's, as in CI) is left as it is, and fails the test."""
    record = root / "engines" / compiled.RECORD
    changed, built = compiled.changed_sources(root), record.stat().st_mtime if record.exists() else None
    if changed and built and all(not (root / p).exists() or (root / p).stat().st_mtime > built for p in changed):
        record.write_text(json.dumps(compiled.source_hashes(root)))
    return root


def _import(root: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SARATHI_HARNESS_")}
    return subprocess.run([sys.executable, "-c", PROBE], cwd=root, env={**clean, "PYTHONPATH": str(root), **env},
                          capture_output=True, text=True, check=True)


def _edit(root: Path, module: str) -> None:
    path = compiled.source_path(root, module)
    path.write_text(path.read_text() + "\nEDITED = True\n")


def test_an_extension_without_its_record_is_never_imported(tmp_path):
    """An extension module the record does not vouch for (here not even a loadable one) is passed
    over for its .py, with one line saying so."""
    root = _tree(tmp_path)
    (root / "engines" / compiled.RECORD).unlink(missing_ok=True)
    (root / "engines" / "core" / f"batch{EXTENSION_SUFFIXES[0]}").write_bytes(b"not a library")
    out = _import(root)
    assert out.stdout.split() == [str(root / "engines/core/batch.py"), str(root / "engines/core/engine.py")]
    assert "changed since the engine core was compiled" in out.stderr and out.stderr.count("\n") == 1


@pytest.mark.skipif(not compiled.is_built(REPO), reason="this checkout has no compiled build (pip install -e .)")
def test_an_edited_source_is_run_from_its_source_and_the_rest_with_it(tmp_path):
    root = _vouched(_tree(tmp_path))
    fresh = _import(root)
    assert all(Path(f).suffix != ".py" for f in fresh.stdout.split()) and fresh.stderr == ""
    _edit(root, "engines.core.engine")
    stale = _import(root)
    assert stale.stdout.split() == [str(root / "engines/core/batch.py"), str(root / "engines/core/engine.py")]
    assert "engines/core/engine.py changed since the engine core was compiled" in stale.stderr
    assert _import(root, SARATHI_HARNESS_PURE="1").stderr == ""  # asked for: no warning


def test_the_compiled_modules_type_check():
    """mypyc compiles only what mypy accepts (setup.py's flags): a change that breaks this would
    leave every install running the source."""
    api = pytest.importorskip("mypy.api")
    paths = [str(compiled.source_path(REPO, m)) for m in compiled.MODULES]
    out, err, status = api.run(["--follow-imports=silent", "--ignore-missing-imports", "--no-incremental", *paths])
    assert status == 0, out + err
