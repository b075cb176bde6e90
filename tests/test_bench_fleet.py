"""benchmarks/bench_fleet.py's traffic: the agents renumbered past the conversations as a plain
field-by-field rewrite would (its shortcut reuses a turn's runs moved for the turn before)."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from harness.workload import load_workload, requests_at_rate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_fleet


def test_shifted_requests_are_the_field_by_field_rewrite():
    sessions = {"kind": "agent", "system_prompts": 3, "system_prompt_tokens": 40, "turns": {"mean": 6},
                "first_user_tokens": {"median": 30, "p90": 90}, "user_tokens": {"median": 20, "p90": 60},
                "output_tokens": {"median": 8, "p90": 20}}
    reqs = requests_at_rate(load_workload({"name": "agent_transcripts", "max_total_tokens": 16384, "sessions": sessions},
                                          300, 3), {"name": "poisson"}, 2.0, 3)
    assert any(r.after is not None for r in reqs)  # turns that lead with the turn before's runs

    def seg(s):
        return None if s is None else s + 1000
    want = [dataclasses.replace(r, request_id=r.request_id + 500, after=None if r.after is None else r.after + 500,
                                prompt_segments=tuple((seg(s), n) for s, n in r.prompt_segments),
                                output_segment=seg(r.output_segment)) for r in reqs]
    got = bench_fleet._shifted(reqs, 500, 1000)
    assert [repr(r) for r in got] == [repr(r) for r in want]
