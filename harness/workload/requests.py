"""Pairing lengths with arrival offsets into the `RequestSpec`s the backends consume."""
from __future__ import annotations

import numpy as np

from common.errors import HarnessError
from harness.records import RequestSpec

from .lengths import Workload


def make_requests(workload: Workload, arrivals: np.ndarray) -> list[RequestSpec]:
    arrivals = np.asarray(arrivals, dtype=np.float64)
    if arrivals.ndim != 1 or arrivals.size != len(workload):
        raise HarnessError(f"{arrivals.size} arrival offsets for {len(workload)} requests ({workload.source})")
    if arrivals.size and (not np.all(np.isfinite(arrivals)) or arrivals[0] < 0 or np.any(np.diff(arrivals) < 0)):
        raise HarnessError("arrival offsets must be finite, >= 0 and nondecreasing")
    return [
        RequestSpec(request_id=i, arrival_s=float(t), prompt_len=int(p), output_len=int(o))
        for i, (t, p, o) in enumerate(zip(arrivals, workload.prompt_lens, workload.output_lens))
    ]
