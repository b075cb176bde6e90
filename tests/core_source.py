"""Tests that instrument the engine core's methods run on its Python source.

A compiled core's classes call their methods directly (engines/compiled.py): a method replaced on
the class (monkeypatch.setattr) would count or change nothing, and such a test would pass or fail
for that reason alone. Where the compiled core is loaded, `on_the_source` runs the test in a child
pytest with SARATHI_HARNESS_PURE=1 (the source) and passes or fails with it.
"""
from __future__ import annotations

import functools
import os
import subprocess
import sys

from engines import compiled


def on_the_source(test):
    @functools.wraps(test)
    def run(*args, **kwargs):
        if not compiled.loaded():
            return test(*args, **kwargs)
        node = f"{sys.modules[test.__module__].__file__}::{test.__name__}"
        env = {**os.environ, compiled.PURE: "1"}
        out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", node],
                             env=env, capture_output=True, text=True)
        assert out.returncode == 0, f"{node} on the engine core's source:\n{out.stdout[-3000:]}{out.stderr[-2000:]}"
    return run
