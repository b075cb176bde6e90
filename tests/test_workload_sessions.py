"""Session workloads (harness/workload/sessions.py): what a turn's prompt is made of, the rate
sessions start at, conversations rebuilt from the ShareGPT trace, and bad input refused in one line."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from common.errors import HarnessError
from harness.workload import load_workload, requests_at_rate
from tests.cli import assert_refused

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
AGENT = {"kind": "agent", "system_prompts": 2, "system_prompt_tokens": 300, "turns": {"mean": 6},
         "first_user_tokens": {"median": 50, "p90": 200}, "user_tokens": {"median": 40, "p90": 150},
         "output_tokens": {"median": 20, "p90": 60}, "think_time_s": 1.0}


def _load(sessions, n=300, max_total=4096, seed=0, **more):
    return load_workload({"name": "t", "max_total_tokens": max_total, "sessions": sessions, **more}, n, seed)


def test_a_turn_carries_the_conversation_so_far():
    w = _load(AGENT)
    reqs = requests_at_rate(w, {"name": "poisson"}, 2.0, 0)
    by_id = {q.request_id: q for q in reqs}
    for q in reqs:
        assert sum(n for _, n in q.prompt_segments) == q.prompt_len
        if q.after is None:
            assert q.think_s == 0 and q.prompt_segments[0] in ((1, 300), (2, 300))  # a system prompt heads it
            continue
        prev = by_id[q.after]
        # previous prompt + previous answer (echoed: the segment it generated) + a new message
        assert q.prompt_segments[:len(prev.prompt_segments)] == prev.prompt_segments
        assert q.prompt_segments[len(prev.prompt_segments)] == (prev.output_segment, prev.output_len)
        assert q.arrival_s == prev.arrival_s and q.think_s > 0
    own: dict[int, set] = {}  # sessions share nothing but their system prompts
    for q, session in zip(reqs, w.sessions.session):
        own.setdefault(int(session), set()).update(s for s, _ in q.prompt_segments[1:])
    assert sum(len(v) for v in own.values()) == len(set().union(*own.values()))


def test_sessions_start_at_the_rate_that_offers_qps_requests():
    w = _load(AGENT, n=2000)
    count = w.sessions.num_sessions
    reqs = requests_at_rate(w, {"name": "constant"}, 4.0, 0)
    starts = sorted({q.arrival_s for q in reqs})
    assert len(starts) == count and np.isclose(starts[0], len(w) / count / 4.0)


def test_dataset_answers_give_the_generated_tokens_their_own_identity():
    reqs = requests_at_rate(_load({**AGENT, "answers": "dataset"}), {"name": "poisson"}, 2.0, 0)
    outputs = {q.output_segment for q in reqs}
    assert not outputs & {s for q in reqs for s, _ in q.prompt_segments}


def test_drawn_sessions_are_cut_at_max_total_tokens_and_say_so():
    w = _load({**AGENT, "turns": {"mean": 40}}, max_total=1500)
    assert np.all(w.prompt_lens + w.output_lens <= 1500)
    assert "turns of" in w.source and "cut at max_total_tokens 1500" in w.source


@pytest.mark.parametrize("sessions, message", [
    ({**AGENT, "think_time_s": -1.0}, "think_time_s must be a number >= 0"),
    ({**AGENT, "system_prompt_tokens": 5000}, "system prompt 0 has 5000 tokens, longer than the model's context"),
    ({**AGENT, "turns": 30}, "sessions overflow max_total_tokens 4096, first session"),
    ({**AGENT, "answers": "maybe"}, "answers must be one of echo, dataset"),
    ({"kind": "agent"}, "turns, first_user_tokens, user_tokens, output_tokens not set"),
    ({"kind": "shared_prefix", "base": "openchat_sharegpt4", "system_prompts": 1, "system_prompt_tokens": 4095},
     "longer than the model's context"),
])
def test_bad_sessions_are_one_line_errors(sessions, message):
    with pytest.raises(HarnessError, match=None) as e:
        _load(sessions)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_fixed_turn_count_that_overflows_says_which_and_how_many():
    with pytest.raises(HarnessError) as e:
        _load({**AGENT, "turns": 30, "system_prompt_tokens": 1000})
    assert re.fullmatch(r"dataset.sessions: \d+ sessions overflow max_total_tokens 4096, first session 3 at turn 28 "
                        r"of 30: \d+ turns would be cut; .*", str(e.value))


@pytest.mark.skipif(not TRACE.is_file(), reason="the ShareGPT trace is not in ../shared/traces")
def test_the_real_conversations_are_rebuilt_from_the_trace():
    w = _load({"kind": "conversation", "lengths": "trace"}, n=2048, max_total=8192, trace_file=str(TRACE),
              sampling="sequential")
    # the trace's first conversations, in file order: 74 | 290, 1402, 2497 | 41, 238, 1045, ...
    assert w.prompt_lens[:5].tolist() == [74, 290, 1402, 2497, 41]
    assert w.sessions.turn[:5].tolist() == [0, 0, 1, 2, 0]
    assert "5678 conversations rebuilt (chain rule)" in w.source


def test_cli_refuses_a_negative_think_time(tmp_path):
    assert_refused(tmp_path, ["experiment=yi34b_tp2_strict", "dataset=sharegpt_conversations",
                              "dataset.sessions.think_time_s=-2", "search.num_requests=64"],
                   "think_time_s must be a number >= 0")


def test_cli_refuses_sessions_on_prefill_and_decode_instances(tmp_path):
    # Sessions run on one engine or its colocated replicas (each turn routed at its release:
    # tests/test_cache_routing.py); prefill/decode instances are refused before anything runs.
    assert_refused(tmp_path, ["experiment=yi34b_tp2_strict", "dataset=sharegpt_conversations",
                              "cluster.prefill_instances=1", "cluster.decode_instances=1",
                              "search.num_requests=64", "scheduler=[sarathi]"], "run on one engine or on colocated")


CONVERSATIONS = "conversation_id,num_prefill_tokens,num_decode_tokens\n"


@pytest.mark.parametrize("rows, message", [
    # a round's id missing
    ("a,10,5\na,20,5\n,30,5\n", "row 3 (line 4): conversation_id is empty"),
    # a conversation's rows split by another's: it would be read as two conversations
    ("a,10,5\nb,12,4\na,20,5\n", "row 3 (line 4): conversation_id = 'a' comes back after another conversation's rows "
                                 "(its rounds began at row 1)"),
    # rounds out of order: the second is shorter than the first's prompt + answer
    ("a,40,5\na,10,5\nb,7,3\n", "row 2 (line 3): num_prefill_tokens = 10 is less than the previous round's "
                                "num_prefill_tokens + num_decode_tokens (40 + 5) of conversation_id 'a'"),
])
def test_a_broken_conversation_trace_is_refused_naming_file_row_and_column(tmp_path, rows, message):
    trace = tmp_path / "conversations.csv"
    trace.write_text(CONVERSATIONS + rows)
    results = tmp_path / "results"
    results.mkdir()
    assert_refused(results, ["experiment=yi34b_tp2_strict", "dataset=sharegpt_conversations",
                             "dataset.sessions.lengths=trace", f"dataset.trace_file={trace}", "dataset.sampling=sequential",
                             "search.num_requests=3", "scheduler=[sarathi]"], f"{trace}: {message}")


def test_a_conversation_trace_with_ids_is_rebuilt_by_them():
    """The same file, well formed: 'a' has two turns (10 + 5 + 5 = 20), 'b' one."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        trace = Path(d) / "ok.jsonl"
        trace.write_text("".join(f'{{"conversation_id": "{c}", "num_prefill_tokens": {p}, "num_decode_tokens": {o}}}\n'
                                 for c, p, o in (("a", 10, 5), ("a", 20, 5), ("b", 7, 3))))
        w = _load({"kind": "conversation", "lengths": "trace"}, n=3, trace_file=str(trace), sampling="sequential")
    assert w.prompt_lens.tolist() == [10, 20, 7] and w.sessions.turn.tolist() == [0, 1, 0]
    assert "2 conversations rebuilt (conversation_id)" in w.source
