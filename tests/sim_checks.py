"""Shared check for simulator tests: two runs of the same requests gave the same records."""
from __future__ import annotations

import numpy as np


def assert_same_records(a, b, fields=("arrival_s", "first_scheduled_s", "finished_s", "num_preemptions")) -> None:
    """Records of two runs agree request by request: every token time bit for bit, and `fields`."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.request_id == y.request_id
        np.testing.assert_array_equal(x.token_times_s, y.token_times_s)
        assert [getattr(x, f) for f in fields] == [getattr(y, f) for f in fields], x.request_id
