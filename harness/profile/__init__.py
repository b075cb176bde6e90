"""Profiling the torch executor on the present device: `python -m harness.profile --help`.

Writes the operator profile in the performance model's long format (`perf=profile` reads it;
engines/perf/profile_format.md) and a table of whole-iteration times; table.py documents both.
Importing this package does not import torch; running the profiler does.
"""
