"""Compiles the engine core with mypyc at install (`pip install -e .`): the modules
engines/compiled.py names (the engine core's, the performance model's pricer and the simulator's
stepping around them), the simulator's event loop about 1.7x faster (docs/vidur.md).

`SARATHI_HARNESS_PURE=1 pip install -e .` skips it. A build that cannot be made (the modules
no longer type-check, no C compiler) is skipped with one line saying why: the package then runs
its Python source, as a checkout without the build does. The rest of the project's metadata is in
pyproject.toml.
"""
from __future__ import annotations

import json
import os
import sys
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
_spec = spec_from_file_location("compiled", ROOT / "engines" / "compiled.py")
compiled = module_from_spec(_spec)
_spec.loader.exec_module(compiled)


READ: dict[str, str] = {}  # the sources' hashes as the build read them (compiled.RECORD)


def skipped(why: str) -> list:
    print(f"sarathi-harness: the engine core is not compiled ({why}); it runs from its Python source", file=sys.stderr)
    return []


def extensions() -> list:
    if os.environ.get(compiled.PURE) == "1":
        return skipped(f"{compiled.PURE}=1")
    try:
        from mypyc.build import mypycify
    except ImportError:
        return skipped("mypy is not installed")
    paths = [str(compiled.source_path(Path(), m)) for m in compiled.MODULES]
    # The modules are type-checked as compiled; what they import is read for its types only
    # (follow-imports=silent: the policies they meet through the Policy protocol are not checked).
    flags = ["--follow-imports=silent", "--ignore-missing-imports"]
    READ.update(compiled.source_hashes(ROOT))  # before mypyc reads them: an edit after reads as stale
    try:  # mypy type-checks the modules first; it exits on an error it prints
        exts = mypycify([*flags, *paths], opt_level="3")
    except (SystemExit, Exception) as e:
        return skipped(f"mypyc failed: {e}")
    for ext in exts:
        ext.optional = True  # no compiler: a warning from setuptools, then the check below
    return exts


class RecordedBuild(build_ext):
    """Builds the extensions, then records the sources they were compiled from (compiled.RECORD),
    or removes them all where any failed (the build is used whole or not at all). Every build
    starts from nothing: an extension left from an earlier build must never pass for this one's."""

    def run(self) -> None:
        if not self.extensions:
            return super().run()
        target = ROOT if self.inplace else Path(self.build_lib)
        record = target / "engines" / compiled.RECORD
        outputs = [Path(p) for p in self.get_outputs()]
        for p in [record, *outputs]:
            p.unlink(missing_ok=True)
        self.force = True
        super().run()
        if not all(p.exists() for p in outputs):
            for p in outputs:
                p.unlink(missing_ok=True)
            skipped("an extension failed to build")
            return
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(READ, indent=1, sort_keys=True) + "\n")


setup(ext_modules=extensions(), cmdclass={"build_ext": RecordedBuild})
