"""Fleet simulation speed (issue 39 item 4): simulated seconds per CPU second of a fleet of
Mistral-7B replicas (1x A100-80G each, Sarathi-Serve, prefix caching) behind a cache-aware router,
under production-shaped traffic: a diurnal rate (`arrival=diurnal`, the day compressed into
`--day-s`), conversations and agents mixed (half the rate each), sessions released by answers.
The same load per replica at every fleet size, so a fleet of k should cost about k times one
replica; the issue's target is 24 simulated hours of 64 replicas in under 10 minutes on 2 cores.

    python benchmarks/bench_fleet.py [--replicas 1,8,64] [--horizon-s 300] [--qps 1.0] [--router session_affinity]

`--workers 1,2` times `cluster.workers` (2: the replicas simulated apart, where the router reads no
replica state: `--lone round_robin` makes session_affinity so). The day's projection is the
run's time scaled by requests to 24 hours of arrivals at `--qps` a replica (its wall time on that
many idle cores: the routing plus the pool's makespan of the instances, each timed by CPU). The last column
projects the issue's target (`--target 64,2`: 64 replicas on 2 cores) from this run's CPU time a
request: `--replicas 1 --horizon-s 86400 --day-s 86400 --lone round_robin` runs one replica's
whole day (its caches warm, its sessions long, as the fleet's are), the best base for it. `--digest` also prints a hash of each fleet's records (fingerprint_sim's): speed work compares it
before and after and must not change it. `--busy 2` runs a second copy at once (untimed), so the CPU
time is a replica's with both cores busy, as the target's two workers are: about 8-10 % more than
alone on this host (the copies share caches and memory), the honest base for the 2-core projection.
`--stream` hands each replica's records to a reduction as they come (SimBackend.record_sink) and
keeps none: a whole day's records take some 16 GB, its requests some 5.5, so only so does a real
day run here (`--replicas 64 --horizon-s 86400 --day-s 86400 --lone round_robin --workers 2 --pool
--stream`). The traffic's generation (in this process, before the run) is printed apart, and so is
the decode-run kernel's load (numba's import and its cached compilation, engines/perf/run_kernel.py:
~0.5 CPU s, once a process): done before the timing, as a day of 64 replicas pays it once per worker
process, not once per replica (the projection would count it 32 times).
"""
from __future__ import annotations

import argparse
import atexit
import subprocess
import sys
import time

import numpy as np

from engines.perf import run_kernel
from harness.backends import open_backend
from harness.backends.sim import partition
from harness.backends.sim.record_columns import field_column
from harness.config import compose
from harness.records import RequestSpec
from harness.config import plan_experiment
from harness.search.probe import probe_requests

from fingerprint_sim import digest, record_hash, recordwise_digest  # benchmarks/ is on sys.path as a script


def _shifted(reqs, id_offset: int, segment_offset: int):
    """Requests of a second workload renumbered past the first's ids and segments (no false sharing).
    A session's turn leads with its previous turn's runs (they come one after another): only the
    runs past those are moved (a day's agents repeat ~10^8)."""
    def move(run):
        return None if run[0] is None else run[0] + segment_offset, run[1]
    out, before, moved = [], (), ()
    for r in reqs:
        runs = r.prompt_segments
        n = len(before)
        moved = moved + tuple(map(move, runs[n:])) if n and runs[:n] == before else tuple(map(move, runs))
        before = runs
        out.append(RequestSpec(r.request_id + id_offset, r.arrival_s, r.prompt_len, r.output_len, r.prompt_token_ids,
                               r.prompt_text, moved, None if r.output_segment is None else r.output_segment + segment_offset,
                               None if r.after is None else r.after + id_offset, r.think_s))
    return out


def fleet_requests(replicas: int, qps: float, horizon_s: float, day_s: float, workers: int = 1):
    """Conversations and agents at qps/2 per replica each; their plans (the first one runs them)."""
    plans, reqs = [], []
    for dataset in ("sharegpt_conversations", "agent_transcripts"):
        n = max(1, round(qps / 2 * replicas * horizon_s))
        plan = plan_experiment(compose([
            "experiment=mistral7b_strict", f"dataset={dataset}", "scheduler=[sarathi]", "engine.prefix_caching=true",
            f"search.num_requests={n}", "arrival=diurnal", f"arrival.period_s={day_s}", "max_model_len=16384",
            f"cluster.instances={replicas}", f"cluster.router={ROUTER}", f"cluster.workers={workers}"] + EXTRA))
        plans.append(plan)
        reqs.append(probe_requests(plan, qps / 2 * replicas))
    conv, agents = reqs
    top = max(max(max(r.prompt_segments)[0], r.output_segment) for r in conv) + 1  # (max of a run: its segment's)
    return plans[0], conv + _shifted(agents, max(r.request_id for r in conv) + 1, top)


ROUTER = "session_affinity"
EXTRA: list[str] = []  # more overrides (--lone)


def main() -> None:
    global ROUTER
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicas", default="1,8,64")
    ap.add_argument("--horizon-s", type=float, default=300.0, help="simulated seconds of arrivals")
    ap.add_argument("--qps", type=float, default=1.0, help="mean rate per replica")
    ap.add_argument("--day-s", type=float, default=600.0, help="the diurnal period, compressed")
    ap.add_argument("--router", default=ROUTER)
    ap.add_argument("--workers", default="1", help="cluster.workers values to time, e.g. 1,2")
    ap.add_argument("--lone", default=None, help="session_affinity's without_session (round_robin: no choice reads "
                    "instance state, so cluster.workers > 1 runs the replicas apart)")
    ap.add_argument("--pool", action="store_true", help="workers > 1: time the real process pool by the wall clock "
                    "(a loaded machine slows it); default: each instance timed here by CPU, the projection taking "
                    "the pool's makespan of them on w workers (what w idle cores would take, less the pool's start)")
    ap.add_argument("--digest", action="store_true", help="print a hash of each fleet's records (and the record-wise "
                    "one --stream prints)")
    ap.add_argument("--stream", action="store_true", help="each replica's records reduced as they come (the last "
                    "finish, with --digest each record's hash, hashed in the routing process: it adds to the time) and "
                    "not kept: what lets a whole day run here (its records take some 16 GB)")
    ap.add_argument("--target", default="64,2", help="REPLICAS,CORES of the day the last column projects (the "
                    "issue's: 64 replicas on 2 cores): this run's CPU seconds a request times that day's requests, "
                    "over the cores")
    ap.add_argument("--busy", type=int, default=1, help="run this many copies of the bench at once (this one "
                    "timed, the others loading the other cores), so the CPU time is what a replica costs with every "
                    "core busy, as the target's workers are (memory shared): --busy 2 for the 2-core target")
    args = ap.parse_args()
    if args.busy < 1:
        ap.error("--busy must be >= 1")
    ROUTER = args.router
    _other_copies(args.busy - 1)  # (killed at exit)
    target_replicas, target_cores = (int(x) for x in args.target.split(","))
    if args.lone:
        EXTRA.append(f"cluster.router_options={{without_session: {args.lone}}}")
    k0 = time.process_time()
    run_kernel.kernel()  # (cached: the runs below find it loaded)
    kernel_s = time.process_time() - k0
    for k in (int(x) for x in args.replicas.split(",")):
        for w in (int(x) for x in args.workers.split(",")):
            g0 = time.process_time()
            plan, reqs = fleet_requests(k, args.qps, args.horizon_s, args.day_s, w)
            generated = time.process_time() - g0  # (not in the times below: the traffic is the run's input)
            shares: list[float] = []  # each instance's CPU seconds
            if w > 1 and not args.pool:  # each instance run here, one after another, its CPU time kept
                partition._map = lambda parts, workers: [_timed(p, shares) for p in parts]
            t0, w0 = time.process_time(), time.perf_counter()
            streamed = _Streamed(len(reqs), args.digest) if args.stream else None
            with open_backend(plan.job("sarathi", progress=False)) as backend:
                backend.record_sink = streamed
                run = backend.run(reqs)
            cpu, wall = time.process_time() - t0, time.perf_counter() - w0
            partition._map = POOL_MAP
            if shares:  # on w idle cores the run takes its routing plus the pool's makespan of its instances
                wall = cpu - sum(shares) + _makespan(shares, w)
            elif w == 1 or not args.pool:
                wall = cpu  # one idle core: its CPU time (the wall clock of a shared machine says little)
            span = streamed.span if streamed is not None else max(r.finished_s for r in run.records
                                                                   if r.finished_s == r.finished_s)
            cache = run.diagnostics.get("prefix_cache", {})
            hit = cache.get("hits", 0) / cache["queries"] if cache.get("queries") else float("nan")
            # With --pool only this process's CPU is counted (the pool's is not): the rate is by wall time.
            rate = f"{span / cpu:8.1f} sim s per CPU s" if w == 1 or not args.pool else f"{span / wall:8.1f} sim s per wall s"
            how = "pool, wall" if args.pool and w > 1 else ("idle cores" if shares else "CPU")
            # A day's cost scales with its requests (the horizon's span also holds the sessions' drain).
            day = wall * DAY_S * k * args.qps / len(reqs)
            # The target fleet's day, its replicas dealt evenly to the cores (each replica apart), at this run's cost a
            # request: its CPU time, or with --pool (where this process's CPU is only the routing) its wall time on w cores.
            per_request = wall * w if args.pool and w > 1 else cpu
            target = per_request / len(reqs) * DAY_S * args.qps * target_replicas / target_cores
            print(f"{k:3d} replicas  {w} workers  {len(reqs):7d} requests  {span:8.0f} sim s  {cpu:8.1f} CPU s  "
                  f"{wall:8.1f} s on {w} ({how})  {rate}  a day projected {day / 60:6.1f} min  "
                  f"({target_replicas} replicas on {target_cores} cores: {target / 60:.1f} min)  "
                  f"hit rate {hit:.3f}  ({ROUTER})  traffic generated in {generated:.1f} CPU s, decode-run kernel loaded in "
                  f"{kernel_s:.1f} CPU s" + (_digests(run.records, streamed) if args.digest else ""),
                  flush=True)


class _Streamed:
    """A run's records reduced as they come (SimBackend.record_sink): the last finish and, if asked,
    each record's hash at its input index (fingerprint_sim.record_hash)."""

    def __init__(self, n: int, hashing: bool) -> None:
        self.span = float("-inf")
        self.hashes: list[bytes] | None = [b""] * n if hashing else None

    def __call__(self, indices, records) -> None:
        finished = field_column(records, "finished_s")  # (from a worker's columns: no record built)
        if (finished == finished).any():
            self.span = max(self.span, float(np.nanmax(finished)))
        if self.hashes is not None:
            for i, r in zip(indices, records):
                self.hashes[i] = record_hash(r)


def _digests(records, streamed: _Streamed | None) -> str:
    """The records' digest (fingerprint_sim's) and their record-wise one; a streamed run's record-wise
    one alone (its records were never all held)."""
    if streamed is not None:
        return f"  record-wise {recordwise_digest(streamed.hashes)[:16]}"
    return f"  records {digest(records)[:16]}  record-wise {recordwise_digest(map(record_hash, records))[:16]}"


def _other_copies(n: int) -> list[subprocess.Popen]:
    """n more copies of this bench with its arguments (output dropped), to keep the other cores busy."""
    argv = sys.argv[1:]
    if "--busy" in argv:
        i = argv.index("--busy")
        del argv[i:i + 2]
    argv = [a for a in argv if not a.startswith("--busy=")]
    copies = [subprocess.Popen([sys.executable, __file__, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
              for _ in range(n)]
    atexit.register(lambda: [c.kill() for c in copies])  # the timed run is done: the load may stop
    return copies


def _timed(part, shares: list[float]):
    part = partition._shipped(part)  # (in the routing process)
    t0 = time.process_time()
    out = partition._run_one_shipped(part)  # what a worker does, its requests' unpacking and records' packing included
    shares.append(time.process_time() - t0)
    return out


def _makespan(times: list[float], workers: int) -> float:
    """When the last of `workers` ends, each taking the next task (in this order) as it frees: the pool's way."""
    ends = [0.0] * workers
    for t in times:
        ends[ends.index(min(ends))] += t
    return max(ends)


POOL_MAP = partition._map
DAY_S = 24 * 3600.0  # the target: a day of the fleet's traffic (projected from the horizon's wall time)


if __name__ == "__main__":
    main()
