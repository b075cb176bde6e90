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


def test_streamed_records_hash_as_the_whole_list_does():
    """--stream's record-wise digest of records handed over an instance's at a time (in any order)
    is the one of the whole list in input order; a changed token time changes it."""
    import numpy as np

    from fingerprint_sim import record_hash, recordwise_digest
    from harness.records import RequestRecord

    records = [RequestRecord(i, 0.5 * i, 10, 3, 0.5 * i, 0.5 * i + 0.1, 0.5 * i + 0.3,
                             np.array([0.5 * i + 0.1, 0.5 * i + 0.2, 0.5 * i + 0.3])) for i in range(7)]
    streamed = bench_fleet._Streamed(len(records), hashing=True)
    for share in ([5, 1, 3], [6, 0], [2, 4]):  # instances' requests, as they come back
        streamed(share, [records[i] for i in share])
    whole = recordwise_digest(map(record_hash, records))
    assert recordwise_digest(streamed.hashes) == whole and streamed.span == records[-1].finished_s
    records[3].token_times_s[1] += 1e-9
    assert recordwise_digest(map(record_hash, records)) != whole
