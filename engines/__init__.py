"""The serving engine: core (sequences, KV blocks, step loop), policies, performance model."""
from pathlib import Path

from engines.compiled import guard

guard(Path(__file__).resolve().parent.parent)  # a stale compiled core is never imported (compiled.py)
