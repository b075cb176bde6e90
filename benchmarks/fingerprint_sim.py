"""A bit-for-bit fingerprint of the simulator: every record of a spread of probes, hashed.

Speed work on the engine core, the simulator loop and the performance model must not change one
bit of what a probe records. Run this on the old tree and on the new one and compare the digests
(`--out FILE` saves them; `--check FILE` compares and exits 1 on any difference, naming the probe).
The probes cover every policy, pipeline parallelism (the replay and stepped loops), a cluster
behind a router, a disaggregated cluster, a sliding-window model, MoE, stop-early and time limits.

    python benchmarks/fingerprint_sim.py --out /tmp/before.json
    python benchmarks/fingerprint_sim.py --check /tmp/before.json
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time

import numpy as np

from harness.backends import open_backend
from harness.config import compose
from harness.config import plan_experiment
from harness.search.probe import probe_requests

# (name, overrides, scheduler, qps)
CASES = [
    ("yi-sarathi", ["experiment=yi34b_tp2_strict"], "sarathi", 1.2),
    ("yi-vllm", ["experiment=yi34b_tp2_strict"], "vllm", 0.36),
    ("yi-vllm-overload", ["experiment=yi34b_tp2_strict"], "vllm", 1.5),
    ("yi-orca", ["experiment=yi34b_tp2_strict"], "orca", 0.35),
    ("yi-ft", ["experiment=yi34b_tp2_strict", "scheduler=[fastertransformer]"], "fastertransformer", 0.5),
    ("yi-hybrid", ["experiment=yi34b_tp2_strict", "scheduler=[hybrid_only]"], "hybrid_only", 0.8),
    ("yi-chunked", ["experiment=yi34b_tp2_strict", "scheduler=[chunked_only]"], "chunked_only", 0.8),
    ("yi-sarathi-arxiv", ["experiment=yi34b_tp2_relaxed", "dataset=arxiv_summarization"], "sarathi", 0.6),
    ("mistral-sarathi", ["experiment=mistral7b_strict"], "sarathi", 3.0),
    ("mistral-vllm-stopearly", ["experiment=mistral7b_strict", "search.stop_early=true"], "vllm", 2.0),
    ("llama70b-pp-sarathi", ["experiment=llama2_70b_tp4pp2_strict"], "sarathi", 0.6),
    ("llama70b-pp-vllm", ["experiment=llama2_70b_tp4pp2_strict"], "vllm", 0.15),
    ("falcon-pp-orca", ["experiment=falcon180b_tp4pp2_strict"], "orca", 0.1),
    ("yi-cluster", ["experiment=yi34b_tp2_strict", "cluster.instances=3", "cluster.router=least_outstanding"], "sarathi", 3.0),
    ("mistral-disagg", ["experiment=mistral7b_strict", "cluster.prefill_instances=2", "cluster.decode_instances=1"], "vllm", 6.0),
    ("mixtral-sarathi", ["experiment=mistral7b_strict", "model=mixtral-8x7b", "hardware=h100_80g", "parallel=tp2", "slo.tbt_s=0.1"], "sarathi", 2.0),
    ("yi-timelimit", ["experiment=yi34b_tp2_strict", "search.time_limit_s=200"], "sarathi", 2.0),
]


def digest(records) -> str:
    h = hashlib.sha256()
    for r in records:
        _fields(h, r)
    return h.hexdigest()


def _fields(h, r) -> None:
    h.update(repr((r.request_id, r.arrival_s, r.prompt_len, r.output_len, r.first_scheduled_s, r.first_token_s,
                   r.finished_s, r.num_preemptions, r.error)).encode())
    h.update(np.ascontiguousarray(r.token_times_s, dtype=np.float64).tobytes())


def record_hash(r) -> bytes:
    """One record's hash, of what `digest` hashes of it: `recordwise_digest` of them in input order
    is the same however the records came (all at once, or an instance's at a time, not all held)."""
    h = hashlib.blake2b(digest_size=16)
    _fields(h, r)
    return h.digest()


def recordwise_digest(hashes) -> str:
    return hashlib.sha256(b"".join(hashes)).hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=512)
    ap.add_argument("--out", help="save the digests as JSON")
    ap.add_argument("--check", help="compare with digests saved by --out; exit 1 on a difference")
    ap.add_argument("--only", help="run only cases whose name contains this")
    args = ap.parse_args()
    want = json.load(open(args.check)) if args.check else {}
    got: dict[str, str] = {}
    bad = 0
    for name, overrides, scheduler, qps in CASES:
        if args.only and args.only not in name:
            continue
        cfg = compose(overrides + [f"search.num_requests={args.requests}"])
        plan = plan_experiment(cfg)
        t0 = time.process_time()
        with open_backend(plan.job(scheduler, progress=False)) as backend:
            records = backend.run(probe_requests(plan, qps), label=name).records
        cpu = time.process_time() - t0
        got[name] = digest(records)
        status = ""
        if name in want:
            status = "same" if want[name] == got[name] else "DIFFERENT"
            bad += status == "DIFFERENT"
        print(f"{name:<24} {cpu:7.2f} s cpu  {got[name][:16]}  {status}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(got, f, indent=1)
    if bad:
        print(f"{bad} probe(s) differ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
