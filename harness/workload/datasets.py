"""`load_workload`: a dataset config (experiments/dataset/<name>.yaml) -> a seeded `Workload`.

Dataset mapping keys:
  name              dataset name; selects the embedded default when trace_file is null
  trace_file        null -> embedded default; a path (CSV or JSONL; relative paths are tried
                    against the current directory, then the repo root) -> that trace, which
                    always wins over the embedded default
  max_total_tokens  requests with prompt + output over it are dropped (counted in `source`);
                    null -> no filter
  sampling          how num_requests are taken from a trace file:
                    shuffle (default): a seeded permutation; if more requests than rows are
                      asked for, further independent permutations follow (each row is used
                      once per pass);
                    sequential: the first num_requests rows in file order (trace replay; pairs
                      with the `trace` arrival process); more than the rows is an error.
                    Embedded defaults are always independent seeded draws.
  synthetic         a mapping (harness.workload.synthetic.SyntheticLengths): lengths set by a
                    sequence length and a P:D ratio instead of a table or a trace
  sessions          a mapping (harness.workload.sessions.SessionSettings): requests that are
                    turns of conversations or agent runs, or share system prompts
Other keys (card, description, ...) are ignored here.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from common.errors import HarnessError

from .distributions import number
from .embedded import sample_embedded
from .lengths import Workload
from .seeding import LENGTHS, check_seed, rng_for
from .trace_file import read_trace

SAMPLING = ("shuffle", "sequential")


def load_workload(dataset: Mapping, num_requests: int, seed: int) -> Workload:
    if not isinstance(dataset, Mapping):
        raise HarnessError(f"dataset must be a mapping, got {type(dataset).__name__}")
    n, seed = number(num_requests, "num_requests", 1, integer=True), check_seed(seed)
    name = dataset.get("name")
    max_total = dataset.get("max_total_tokens")
    if max_total is not None:
        max_total = number(max_total, "dataset.max_total_tokens (or null)", 2, integer=True)
    sampling = dataset.get("sampling") or "shuffle"
    if sampling not in SAMPLING:
        raise HarnessError(f"dataset.sampling must be one of {', '.join(SAMPLING)}, got {sampling!r}")
    synthetic = dataset.get("synthetic")
    if synthetic:
        from harness.typed import typed

        from .synthetic import SyntheticLengths, synthetic_workload

        return synthetic_workload(typed(SyntheticLengths, synthetic, "dataset.synthetic"), n, seed, str(name))
    if dataset.get("sessions"):  # conversations, agent transcripts, shared system prompts
        from .session_kinds import load_sessions

        return load_sessions(dataset, n, seed, max_total)
    rng = rng_for(LENGTHS, seed)
    trace_file = dataset.get("trace_file")

    if trace_file in (None, ""):
        if sampling == "sequential":
            raise HarnessError(f"dataset.sampling=sequential needs a trace_file (dataset {name!r} has none)")
        p, o, origin = sample_embedded(str(name), n, rng, max_total)
        return Workload(p, o, f"{name}: {origin}; {n} draws, seed {seed}, max_total_tokens {max_total}")

    rows = read_trace(trace_file, max_total)
    m = rows.prompt_lens.size
    if sampling == "sequential":
        if n > m:
            raise HarnessError(f"{rows.path}: {n} requests asked for but only {m} rows remain after filtering (sampling=sequential)")
        idx = np.arange(n)
    else:
        passes = -(-n // m)
        idx = np.concatenate([rng.permutation(m) for _ in range(passes)])[:n]
    return Workload(rows.prompt_lens[idx], rows.output_lens[idx], f"{name}: {rows.describe()}; {n} requests, "
                    f"sampling {sampling}, seed {seed}, max_total_tokens {max_total}")
