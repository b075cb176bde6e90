"""Profiling the torch executor on the present device: `python -m harness.profile --help`.

Writes the operator profile in the performance model's long format (`perf=profile` reads it;
engines/perf/profile_format.md) and a table of whole-iteration times; table.py documents both.
Importing this package does not import torch; running the profiler does.
"""
from harness.profile.table import (ITERATION_COLUMNS, OP_COLUMNS, OPS, PHASES, Measurement, iterations_path,
                                   read_iterations, write_tables)

__all__ = ["ITERATION_COLUMNS", "Measurement", "OPS", "OP_COLUMNS", "PHASES", "iterations_path", "read_iterations",
           "write_tables"]
