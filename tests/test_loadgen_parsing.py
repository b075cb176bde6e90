"""The load generator's pure pieces: SSE splitting, token accounting, the dispatch-lag verdict."""
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.sse import SseSplitter
from harness.loadgen.tokens import parse_stream
from harness.loadgen.validity import LagPolicy, judge_dispatch


def _event(obj) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


@given(st.lists(st.binary(min_size=1, max_size=40).filter(lambda b: b"\n" not in b and b"\r" not in b), max_size=20),
       st.lists(st.integers(1, 30), max_size=50))
def test_splitter_finds_every_event_whatever_the_read_boundaries(payloads, cuts):
    stream = b"".join(b"data: " + p + b"\n\n" for p in payloads)
    split, out, pos = SseSplitter(), [], 0
    for c in cuts:
        out += split.feed(stream[pos:pos + c])
        pos += c
    out += split.feed(stream[pos:])
    assert out == [p.lstrip(b" ") for p in payloads]
    assert split.pending == b""


def test_splitter_crlf_and_comments():
    split = SseSplitter()
    assert split.feed(b": keep-alive\r\n\r\ndata: {\"a\":1}\r\n\r\ndata: [DO") == [b'{"a":1}']
    assert split.feed(b"NE]\n\n") == [b"[DONE]"]


def _chunk(ids, finish=None, usage=None, timing=None):
    obj = {"choices": [{"index": 0, "text": "x" * len(ids), "finish_reason": finish, "token_ids": ids}]}
    if usage is not None:
        obj["usage"] = {"prompt_tokens": 7, "completion_tokens": usage, "total_tokens": 7 + usage}
    if timing is not None:
        obj["server_timing"] = timing
    return json.dumps(obj).encode()


def test_continuous_usage_counts_several_tokens_per_event():
    events = [(1.0, _chunk([5], usage=1)), (2.0, _chunk([6, 7, 8], usage=4)), (3.0, _chunk([], usage=4)),
              (4.0, _chunk([9], "length", usage=5)),
              (4.1, json.dumps({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 5}}).encode()),
              (4.2, b"[DONE]")]
    p = parse_stream(events)
    assert p.source == "continuous_usage"
    assert p.token_times == [1.0, 2.0, 2.0, 2.0, 4.0]
    assert (p.prompt_tokens, p.completion_tokens, p.finish_reason, p.error) == (7, 5, "length", None)


def test_token_ids_when_no_usage_and_timing_extension():
    timing = {"arrival": 0.5, "first_scheduled": 0.6, "token_times": [1.0, 2.0, 2.0]}
    p = parse_stream([(1.0, _chunk([1])), (2.0, _chunk([2, 3], "length", timing=timing)), (2.1, b"[DONE]")])
    assert p.source == "token_ids" and p.token_times == [1.0, 2.0, 2.0]
    assert p.server_timing == timing


def test_event_counting_is_reconciled_with_the_usage_total():
    text = lambda s, f=None: json.dumps({"choices": [{"text": s, "finish_reason": f}]}).encode()  # noqa: E731
    usage = json.dumps({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}).encode()
    p = parse_stream([(1.0, text("a")), (2.0, text("")), (3.0, text("bcd", "length")), (3.1, usage)])
    assert p.source == "events" and p.token_times == [1.0, 3.0, 3.0, 3.0]


def test_error_event_and_garbage_are_reported():
    p = parse_stream([(1.0, _chunk([1])), (2.0, b'{"error": {"message": "boom"}}')])
    assert "boom" in p.error
    assert "unparseable" in parse_stream([(1.0, b"{nope")]).error


def test_dispatch_verdict_thresholds():
    ok = judge_dispatch(np.full(1000, 0.0002))
    assert ok.status == "ok" and ok.valid
    warn = judge_dispatch(np.r_[np.zeros(980), np.full(20, 0.003)])
    assert warn.status == "warn" and warn.valid and "3.000 ms" in warn.message
    bad = judge_dispatch(np.r_[np.zeros(980), np.full(20, 0.05)])
    assert bad.status == "invalid" and not bad.valid
    strict = judge_dispatch(np.full(10, 0.0005), LagPolicy(warn_s=0.0001, invalid_s=0.0004))
    assert strict.status == "invalid"
    assert judge_dispatch(np.array([np.nan])).num_sent == 0
    with pytest.raises(ValueError):
        LagPolicy(warn_s=0.01, invalid_s=0.001)
