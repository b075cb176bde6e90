"""The load generator's pure pieces: SSE splitting, token accounting, the dispatch-lag verdict."""
import json
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.sse import SseSplitter
from harness.loadgen import UNFINISHED, ClientLoad, LoadOptions
from harness.loadgen.collect import failed_at_a_glance, request_error, sse_events
from harness.loadgen.http import Exchange
from harness.loadgen.tokens import parse_stream
from harness.loadgen.validity import LagPolicy, judge_dispatch
from harness.records import RequestSpec, error_kind


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
    assert ok.status == "ok"
    warn = judge_dispatch(np.r_[np.zeros(980), np.full(20, 0.003)])
    assert warn.status == "warn" and "3.000 ms" in warn.message
    bad = judge_dispatch(np.r_[np.zeros(980), np.full(20, 0.05)])
    assert bad.status == "invalid"
    strict = judge_dispatch(np.full(10, 0.0005), LagPolicy(warn_s=0.0001, invalid_s=0.0004))
    assert strict.status == "invalid"
    assert judge_dispatch(np.array([np.nan])).num_sent == 0
    with pytest.raises(ValueError):
        LagPolicy(warn_s=0.01, invalid_s=0.001)


# -- every usage field checked (issue 28.2) ---------------------------------------------------------

def _final_usage(prompt, completion, total=None):
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    if total is not None:
        usage["total_tokens"] = total
    return json.dumps({"choices": [], "usage": usage}).encode()


def test_a_final_usage_claiming_more_than_was_streamed_is_a_usage_error():
    events = [(1.0, _chunk([5], usage=1)), (2.0, _chunk([6], "length", usage=2)), (3.0, _final_usage(7, 7))]
    p = parse_stream(events)
    assert error_kind(p.error) == "usage" and "claims 7 completion tokens, the stream carried 2" in p.error
    honest = parse_stream(events[:2] + [(3.0, _final_usage(7, 2, 9))])
    assert honest.error is None and honest.token_times == [1.0, 2.0]


@pytest.mark.parametrize("events, says", [
    ([(1.0, _chunk([5, 6], usage=1)), (2.0, _final_usage(7, 1))], "grew by 1 on an event with 2 token ids"),
    ([(1.0, _chunk([5])), (2.0, _chunk([6], "length")), (3.0, _final_usage(7, 3))], "claims 3 completion tokens, "
                                                                                    "the stream carried 2"),
    ([(1.0, _chunk([5], usage=1)), (2.0, _final_usage(7, 1, 9))], "total_tokens 9 != prompt_tokens 7"),
    ([(1.0, _chunk([5], usage=1)), (2.0, _final_usage(8, 1))], "prompt_tokens 7 then 8"),
    ([(1.0, _chunk([5, 6], usage=2)), (2.0, _chunk([], usage=1))], "completion_tokens fell from 2 to 1"),
])
def test_inconsistent_usage_is_named(events, says):
    p = parse_stream(events)
    assert error_kind(p.error) == "usage" and says in p.error, p.error


def test_text_events_may_coalesce_tokens_but_usage_may_not_claim_fewer():
    text = lambda s: json.dumps({"choices": [{"text": s}]}).encode()  # noqa: E731
    fewer = parse_stream([(1.0, text("a")), (2.0, text("b")), (3.0, text("c")), (3.1, _final_usage(3, 2))])
    assert error_kind(fewer.error) == "usage"


def _attempt(spec, events, status=200, ended=True):
    """A finished request as run.py holds it: its planned and dispatch times and its Exchange;
    `ended=False`: its stream's end never came, the wait for it was cancelled."""
    x = Exchange(b"")
    x.status, x.sent_at = status, 0.0
    x.pieces = [(1.0 + i, b"data: " + e + b"\n\n") for i, e in enumerate(events)]

    class Done:
        def done(self):
            return True

        def cancelled(self):
            return not ended
    x.done = Done()
    return SimpleNamespace(x=x, error=None, dispatched=0.0, planned=0.0)


SPEC = RequestSpec(0, 0.0, 7, 2)
OPTS = LoadOptions(base_url="http://127.0.0.1:1", model="asked")


def _judged(events, spec=SPEC, opts=OPTS):
    a = _attempt(spec, events)
    return request_error(spec, a, parse_stream(sse_events(a.x)), opts), failed_at_a_glance(spec, a, opts)


def _named(model, ids, finish=None, usage=None):
    obj = json.loads(_chunk(ids, finish, usage))
    obj["model"] = model
    return json.dumps(obj).encode()


def test_each_wrong_answer_is_its_own_kind_and_seen_as_the_request_ends():
    good = [_named("asked", [5], usage=1), _named("asked", [6], "length", usage=2), _final_usage(7, 2), b"[DONE]"]
    assert _judged(good) == (None, False)
    cases = {
        "model": [_named("other", [5], usage=1), _named("other", [6], "length", usage=2), b"[DONE]"],
        "extra_output": [_named("asked", [5, 6, 7], "length", usage=3), _final_usage(7, 3), b"[DONE]"],
        "short_output": [_named("asked", [5], "length", usage=1), _final_usage(7, 1), b"[DONE]"],
        "prompt_len": [_named("asked", [5, 6], "length"), _final_usage(9, 2), b"[DONE]"],
        "usage": [_named("asked", [5], usage=1), _named("asked", [6], "length", usage=2), _final_usage(7, 4)],
        "malformed": [_named("asked", [5], usage=1), b"tok", b"[DONE]"],
    }
    for kind, events in cases.items():
        error, glance = _judged(events)
        assert error_kind(error) == kind and glance, (kind, error, glance)


def test_a_cut_off_is_no_failure_at_a_glance_but_a_stream_that_never_ended_is_one():
    a = _attempt(SPEC, [_named("asked", [5], usage=1)])
    a.error = UNFINISHED
    assert not failed_at_a_glance(SPEC, a, OPTS)
    assert request_error(SPEC, a, parse_stream(sse_events(a.x)), OPTS) == UNFINISHED
    every_token = _attempt(SPEC, [_named("asked", [5, 6], "length", usage=2)], ended=False)  # last bytes at 1 s
    every_token.error = "stalled: no bytes for 30 s mid-stream"
    error = request_error(SPEC, every_token, parse_stream(sse_events(every_token.x)), OPTS)
    assert error.startswith("stream did not end after its last token") and error_kind(error) == "stream_cut"
    # Cut off by a time limit: the server's fault only if the stream had long been silent then
    every_token.error = UNFINISHED
    assert request_error(SPEC, every_token, parse_stream(sse_events(every_token.x)), OPTS, 1.2) == UNFINISHED
    late = request_error(SPEC, every_token, parse_stream(sse_events(every_token.x)), OPTS, 5.0)
    assert late.startswith("stream did not end after its last token")
    # ... unless its end came as the run stopped: the cancel won a race with a finished stream
    finished = _attempt(SPEC, [_named("asked", [5, 6], "length", usage=2)])
    finished.error = UNFINISHED
    assert request_error(SPEC, finished, parse_stream(sse_events(finished.x)), OPTS, 5.0) == UNFINISHED


@pytest.mark.parametrize("load, cause", [
    (dict(waited_for_connection=5), "connections: 5 requests waited for a connection"),
    (dict(cpu_s=0.95), "CPU: the client used 95% of a core"),
    (dict(wake_lag_s=0.04), "host CPU: the client's own timer thread woke 40.0 ms late"),
    (dict(wake_lag_s=0.0002), "event loop: the timer thread woke on time"),
])
def test_an_invalid_lag_verdict_names_its_cause_and_the_switch(load, cause):
    client = ClientLoad(**{"cpu_s": 0.1, "wall_s": 1.0, "max_connections": 4, "peak_connections": 4,
                           "waited_for_connection": 0, "continuous_usage": False, **load})
    v = judge_dispatch(np.r_[np.zeros(900), np.full(100, 0.05)], client=client)
    assert v.status == "invalid" and cause in v.message and "backend.strict=false" in v.message, v.message
