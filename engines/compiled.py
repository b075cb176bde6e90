"""The engine core's compiled build (mypyc), and the guard that never runs a stale one.

`pip install -e .` compiles MODULES with mypyc (setup.py), the simulator's hot core, and records
the hashes of the sources it read beside them (RECORD). At import, `guard` (engines/__init__.py) compares
those hashes with the sources: where any of them changed since the build, every module of the
build is imported from its .py, with one warning line naming the changed files. All or none: the
compiled modules call each other's classes directly (one C library), so a compiled module beside
an interpreted one of the same build would meet two `Sequence` classes. A checkout without the
build (no extension modules) runs its .py files as before, silently.

This module imports nothing of the package: setup.py loads it by its path, before the package is
built.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from importlib.util import spec_from_file_location
from pathlib import Path
from typing import TYPE_CHECKING

# The hot core (benchmarks/RESULTS.md's profiles: the prefix cache's files, the engine's step and
# its decode pass, the block manager). Not its statistics records (tests read them with vars()),
# the policy protocol, or the policies (the registry reads their constructors' signatures). And the
# vLLM plugin's MirrorEngine, compiled with the Engine it subclasses; and the performance model's
# one-batch and decode-run pricer (batch_pricer, decode_runs; the per-item sums and a decode run's
# rows in scalar_rows, numpy-free). And Sarathi's schedule body (stall_free), which its policy calls.
MODULES = tuple(f"engines.core.{name}" for name in (
    "batch", "block_manager", "caching_engine", "chain_memo", "checks", "decode_pass", "engine",
    "parked_turns", "prefix_cache", "sequence", "tokens")) + ("engines.external.vllm_scheduler.mirror",
                                                               "engines.perf.batch_pricer",
                                                               "engines.perf.decode_runs",
                                                               "engines.perf.scalar_rows",
                                                               "engines.schedulers.stall_free") + (
    # The simulator's per-step stepping and the timeline it writes each iteration (stepping.py): outside
    # engines/, compiled in the same build so their calls into the core are direct. The guard covers
    # them as it covers the core (harness/backends/sim imports engines before either of them).
    "harness.backends.sim.engine_sequence", "harness.backends.sim.releases", "harness.backends.sim.stepping",
    "harness.backends.sim.timeline")
RECORD = "compiled_sources.json"  # beside this file: {source: sha256} of the sources the build read
# What the build reads: the compiled modules and the engine core's other modules, whose types and
# constants mypyc compiles against (a changed one makes the build stale as well).
READ = "engines/core"
# The compiled classes' options, read by mypyc. Each class says serializable (pickled as CPython
# pickles an instance: a simulation's engines go to a process pool, harness/backends/sim/partition.py)
# and allow_interpreted_subclasses (without it a serializable class's __init__ is never run:
# mypyc 2.4.1 and 1.18.2 leave its tp_init empty; it also lets a subclass in Python extend it).
if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr
else:
    def mypyc_attr(*args, **kwargs):
        """mypy_extensions.mypyc_attr at run time: a no-op (running the source needs no mypy_extensions)."""
        return lambda cls: cls
PURE = "SARATHI_HARNESS_PURE"  # =1: never build (setup.py) nor import the compiled modules
_WARNED = "SARATHI_HARNESS_STALE_WARNED"  # set once warned: a run's worker processes do not repeat it


def source_path(root: Path, module: str) -> Path:
    """The .py of `module` under `root`, the directory holding the `engines` package."""
    return root.joinpath(*module.split(".")).with_suffix(".py")


def source_hashes(root: Path) -> dict[str, str]:
    """sha256 of each source the build reads, by its path under `root`."""
    paths = set((root / READ).glob("*.py")) | {source_path(root, m) for m in MODULES}
    # (a source absent is left out: against a record that has it, it reads as changed)
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(paths)
            if p.exists()}


def is_built(root: Path) -> bool:
    """Does any module of the build have an extension module beside its .py?"""
    return any(source_path(root, m).with_suffix(suffix).exists() for m in MODULES for suffix in EXTENSION_SUFFIXES)


def changed_sources(root: Path) -> list[str]:
    """The sources that are not those the build read (added, removed or edited; all of them
    without a record)."""
    record = root / "engines" / RECORD
    built = json.loads(record.read_text()) if record.exists() else {}
    now = source_hashes(root)
    return sorted(p for p in now.keys() | built.keys() if built.get(p) != now.get(p))


class SourceFinder:
    """Finds the build's modules' .py files, ahead of their extension modules (sys.meta_path)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(self, fullname: str, path=None, target=None):
        if fullname not in MODULES:
            return None
        return spec_from_file_location(fullname, source_path(self.root, fullname))

    def invalidate_caches(self) -> None:
        return None


def guard(root: Path) -> None:
    """Import the build's modules from their .py where the build is stale or PURE is set."""
    if not is_built(root):
        return
    if os.environ.get(PURE) != "1":
        changed = changed_sources(root)
        if not changed:
            return
        if os.environ.get(_WARNED) != "1":
            _warn(changed)
            os.environ[_WARNED] = "1"
    if not any(isinstance(f, SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, SourceFinder(root))


def _warn(changed: list[str]) -> None:
    names = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
    print(f"sarathi-harness: {names} changed since the engine core was compiled: running it from its "
          "Python source (slower; rebuild: `pip install -e .` or `python setup.py build_ext --inplace`; "
          f"or set {PURE}=1 to silence this)", file=sys.stderr)


def loaded() -> bool:
    """Does this process run the compiled engine core?"""
    import engines.core.engine  # (here, not above: setup.py loads this module before the package is built)
    return any(str(engines.core.engine.__file__).endswith(s) for s in EXTENSION_SUFFIXES)
