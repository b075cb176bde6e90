"""Workload layer: dataset cards and traces -> `RequestSpec`s; arrival processes.

Public API:
    Workload                                          lengths only (see lengths.py)
    load_workload(dataset, num_requests, seed)        seeded lengths from a dataset config
    arrival_offsets(process, rate, n, seed)           absolute arrival offsets (s)
    make_requests(workload, arrivals)                 -> list[RequestSpec]
    requests_at_rate(workload, arrival, qps, seed)    a probe's requests (sessions start at qps x sessions / requests)
    prompt_token_ids(n_tokens, vocab_size, seed, special_ids)   random non-special ids (live runs)
    with_prompt_token_ids(requests, vocab_size, seed, special_ids)
    concurrency_limit(process)                        closed-loop limit a backend must honour

No I/O happens during a run: everything is read when the workload is built.
"""
from .arrivals import arrival_offsets, concurrency_limit
from .datasets import load_workload
from .lengths import Workload
from .prompts import prompt_token_ids, with_prompt_token_ids
from .requests import make_requests, requests_at_rate

__all__ = ["Workload", "load_workload", "arrival_offsets", "make_requests", "requests_at_rate", "concurrency_limit",
           "prompt_token_ids", "with_prompt_token_ids"]
