"""The compiled pricer classes' options (mypyc_attr), as engines/compiled.py gives the core's.

That module is not imported by the performance model (it names the core, which the model never
imports), and a compiled module cannot hold this (mypyc takes the run-time branch below for
unreachable): so this module, never compiled, holds it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr
else:
    def mypyc_attr(*args, **kwargs):
        """mypy_extensions.mypyc_attr at run time: a no-op (running the source needs no mypy_extensions)."""
        return lambda cls: cls

__all__ = ["mypyc_attr"]
