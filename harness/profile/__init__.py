"""Profiling the torch executor on the present device: `python -m harness.profile --help`.

Writes a profile table CSV (format in table.py) of per-operator and whole-iteration times that
the performance model can read (`perf=profile`). Importing this package does not import torch;
running the profiler does.
"""
from harness.profile.table import COLUMNS, OPS, PHASES, ProfileRow, read_table, write_table

__all__ = ["COLUMNS", "OPS", "PHASES", "ProfileRow", "read_table", "write_table"]
