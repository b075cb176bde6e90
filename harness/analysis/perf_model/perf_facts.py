"""The paper's operator-level facts against the performance model (engines.perf).

These are not capacity results, so there is nothing saved to read: the value is model arithmetic
(microseconds of CPU, no simulation, no experiment). The report shows them beside the capacity
comparison because the capacity numbers inherit whatever the model gets wrong here.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd

from engines.perf.queries import chunked_prefill_time, decode_iteration_time
from harness.analysis.paper import PerfFact


def _model(params: Mapping):
    from engines.perf import Deployment, PerfModel  # imported lazily: the rest of analysis needs no perf model

    kw = {k: params[k] for k in ("topology", "gpus_per_node") if k in params}
    return PerfModel(Deployment.create(model=params["model"], gpu=params["gpu"], tp=params.get("tp", 1),
                                       pp=params.get("pp", 1), **kw))


# kind -> the fact's value from (the model, the fact's params)
KINDS: dict[str, Callable] = {
    "chunking_overhead": lambda p, params: max(chunked_prefill_time(p, n, int(params["chunk"])) / p.iteration_time([n], [0]) - 1
                                               for n in params["prompts"]),
    "tile_quantization": lambda p, params: p.iteration_time([257], [0]) / p.iteration_time([256], [0]) - 1,
    "prefill_saturation": lambda p, params: (p.iteration_time([512], [0]) / 512) / (p.iteration_time([4096], [0]) / 4096),
    # Through every stage plus the sends: the paper quotes the latency a request sees.
    "prefill_latency": lambda p, params: float(p.pipeline_latency(np.array([4096]), np.array([0]))),
    # One stage's share: a pipeline bubble is the gap between two micro-batches' stage times.
    "prefill_stage": lambda p, params: float(p.batch_times(np.array([4096]), np.array([0]))),
    "decode_latency": lambda p, params: decode_iteration_time(p),
}


def _within(f: PerfFact, v: float) -> bool:
    if f.params.get("bound") == "upper":  # "at most ~x": anything below the ceiling (+ tolerance) agrees
        ceiling = f.value * (1 + f.tolerance.rel) if f.tolerance.rel is not None else f.value + f.tolerance.abs
        return v <= ceiling
    return f.tolerance.within(f.value, v)


def perf_fact_table(facts: tuple[PerfFact, ...]) -> pd.DataFrame:
    """One row per fact: published, model value, tolerance, within; `note`: the fact's own, or why it was not computed."""
    rows = []
    for f in facts:
        row = {"id": f.id, "claim": f.claim, "source": f.source, "published": f.value,
               "reproduced": float("nan"), "tolerance": f.tolerance.describe()
               + (" (upper bound)" if f.params.get("bound") == "upper" else ""),
               "within": False, "note": str(f.params.get("note", ""))}  # the YAML's, where a fact is a known miss
        fn = KINDS.get(f.params.get("kind", ""))
        if fn is None:
            row["note"] = f"unknown kind {f.params.get('kind')!r}"
        else:
            try:
                row["reproduced"] = fn(_model(f.params), f.params)
                row["within"] = _within(f, row["reproduced"])
            except Exception as e:  # a missing catalog entry must not sink the whole report
                row["note"] = f"not computed: {type(e).__name__}: {e}"
        rows.append(row)
    return pd.DataFrame(rows)
