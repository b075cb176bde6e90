"""Soak of the in-repo server's new paths: the prefix cache, conversations and agents, aborted
streams and preemption, with the torch executor on a tiny model (tiny-llama, random weights, fp32
on CPU), for two policies, each its own fresh server (benchmarks/soak_client.py sends the load).

Each policy's server runs with prefix caching on and a KV cache far smaller than the sessions'
contexts (preemption by recompute), `--workers` sessions at a time for the policy's share of
`--minutes`, 10 % of the streams cut by the client mid-way. Then, checked and printed:

  kv books      at rest, every KV block free or cached (kv_blocks_used 0) and the block manager's
                audit passes (reference counts match the live tables: /metrics?audit=1)
  rss flat      the server's RSS after warm-up (the first 25 % of its run) grows by at most
                RSS_BOUND_MIB (a leak of a few KB a request shows over thousands of requests)
  no 5xx        no answer or stream error of the server's own fault (nor any other non-200)
  same tokens   up to --replay completed turns (every k-th) sent again, one by one, to a fresh
                server of the same policy without a prefix cache: greedy, the same tokens
  metrics       /metrics agrees with the client: requests received = streams answered 200;
                finished + aborted = received; aborted <= streams cut (a cut stream may have
                finished server-side first); tokens generated >= tokens the client read; prefix
                cache hits >= the cached tokens the client was told
  exercised     the soak did what it claims: preemptions, prefix-cache hits and cut streams > 0

    python benchmarks/bench_soak.py [--minutes 5] [--policies sarathi,vllm] [--workers 12]

Exit status 1 when a check fails (0 otherwise). The RSS check needs a minute after warm-up to mean
anything: shorter runs print it as n/a (the short test, tests/test_soak.py).
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from benchmarks.soak_client import Server, Turn, drive, replay  # noqa: E402
from engines.schedulers import policy_spec  # noqa: E402
from harness.backends.live.lifecycle import free_port  # noqa: E402

RSS_BOUND_MIB = 32.0
WARMUP_SHARE = 0.25
RSS_MIN_SPAN_S = 60.0  # after warm-up: shorter, RSS growth says nothing


@dataclass(frozen=True)
class SoakSettings:
    seconds_per_policy: float
    policies: tuple[str, ...] = ("sarathi", "vllm")
    workers: int = 12
    kv_tokens: int = 2048  # 128 blocks of 16: a few sessions' contexts
    max_model_len: int = 512
    max_num_seqs: int = 12
    token_budget: int = 128
    cut_share: float = 0.1
    replay: int = 300
    seed: int = 0
    model: str = "tiny-llama"


@dataclass
class PolicySoak:
    policy: str
    turns: list[Turn]
    metrics: dict[str, float]
    rss: list[tuple[float, float]]  # (seconds since start, MiB)
    replayed: int = 0
    mismatched: int = 0
    checks: list[tuple[str, bool | None, str]] = field(default_factory=list)  # name, verdict (None: n/a), figures

    @property
    def ok(self) -> bool:
        return all(v is not False for _, v, _ in self.checks)


def soak_policy(s: SoakSettings, policy: str) -> PolicySoak:
    knobs = dict(model=s.model, kv_tokens=s.kv_tokens, max_model_len=s.max_model_len, max_num_seqs=s.max_num_seqs,
                 token_budget=s.token_budget)
    with Server(policy, True, port=free_port(), **knobs) as server:
        rss: list[tuple[float, float]] = []
        stop = threading.Event()
        t0 = time.monotonic()

        def sample() -> None:
            while not stop.is_set():
                rss.append((time.monotonic() - t0, server.rss_mib()))
                stop.wait(1.0)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            turns = asyncio.run(drive(server.url, s.seconds_per_policy, s.workers, s.seed, s.max_model_len, s.cut_share))
        finally:
            stop.set()
            sampler.join()
        metrics = server.idle()
    out = PolicySoak(policy, turns, metrics, rss)
    done = [t for t in turns if t.completed]
    chosen = done[::max(1, -(-len(done) // s.replay))] if s.replay else []
    if chosen:
        with Server(policy, False, port=free_port(), **knobs) as plain:
            again = asyncio.run(replay(plain.url, chosen, 1))
        out.replayed = len(chosen)
        out.mismatched = sum(a != t.tokens for a, t in zip(again, chosen))
    out.checks = checks(out)
    return out


def rss_growth(rss: list[tuple[float, float]]) -> tuple[float, float, float] | None:
    """(MiB at the end of warm-up, the most after it, its growth), or None when the span after
    warm-up is under RSS_MIN_SPAN_S."""
    if not rss:
        return None
    end = rss[-1][0]
    warm = [m for t, m in rss if t <= WARMUP_SHARE * end]
    after = [m for t, m in rss if t > WARMUP_SHARE * end]
    if not warm or not after or end * (1 - WARMUP_SHARE) < RSS_MIN_SPAN_S:
        return None
    return warm[-1], max(after), max(after) - warm[-1]


def checks(p: PolicySoak) -> list[tuple[str, bool | None, str]]:
    m, turns = p.metrics, p.turns
    answered = [t for t in turns if t.status == 200]
    server_faults = [t for t in turns if t.status >= 500 or (t.status == 200 and t.error is not None)]
    other = [t for t in turns if t.status not in (200,) and t.status < 500]
    cut = sum(t.cut for t in turns)
    done = [t for t in turns if t.completed]
    read = sum(len(t.tokens) for t in turns)
    growth = rss_growth(p.rss)
    received, finished, aborted = m["requests_received_total"], m["requests_finished_total"], m["requests_aborted_total"]
    hits, told = m.get("prefix_cache_hits_total", 0.0), sum(t.cached for t in done)
    return [
        ("kv books", m["kv_blocks_used"] == 0 and m.get("kv_books_balanced") == 1,
         f"{m['kv_blocks_used']:.0f} blocks used, {m.get('kv_blocks_cached', 0):.0f} cached, "
         f"{m['kv_blocks_total']:.0f} in all; audit {'passes' if m.get('kv_books_balanced') == 1 else 'FAILS'}"),
        ("rss flat", None if growth is None else growth[2] <= RSS_BOUND_MIB,
         "n/a (under a minute after warm-up)" if growth is None else
         f"{growth[0]:.1f} MiB after warm-up, at most {growth[1]:.1f} after: +{growth[2]:.1f} MiB "
         f"(bound {RSS_BOUND_MIB:g})"),
        ("no 5xx", not server_faults and not other,
         f"{len(server_faults)} server faults, {len(other)} other non-200"
         + (f"; first: {(server_faults or other)[0].status} {(server_faults or other)[0].error}" if server_faults or other else "")),
        ("same tokens", p.mismatched == 0 and p.replayed > 0,
         f"{p.replayed} completed turns replayed without a cache, {p.mismatched} differ"),
        ("metrics", received == len(answered) and finished + aborted == received and aborted <= cut
         and m["generation_tokens_total"] >= read and hits >= told,
         f"received {received:.0f} (client: {len(answered)} answered), finished {finished:.0f} + aborted "
         f"{aborted:.0f} (client: {len(done)} completed, {cut} cut), generated {m['generation_tokens_total']:.0f} "
         f"(client read {read}), cache hits {hits:.0f} tokens (client told {told})"),
        ("exercised", m["num_preemptions_total"] > 0 and hits > 0 and cut > 0,
         f"{m['num_preemptions_total']:.0f} preemptions, hit rate "
         f"{hits / max(1.0, m.get('prefix_cache_queries_total', 0.0)):.1%}, {cut} streams cut"),
    ]


def report(p: PolicySoak, seconds: float) -> str:
    kinds = {k: sum(t.kind == k for t in p.turns) for k in ("conversation", "agent")}
    lines = [f"{p.policy}: {len(p.turns)} turns in {seconds:.0f} s ({len(p.turns) / seconds:.1f}/s; "
             f"{kinds['conversation']} conversation, {kinds['agent']} agent), "
             f"{sum(len(t.tokens) for t in p.turns)} tokens read, RSS {p.rss[0][1]:.1f} -> {p.rss[-1][1]:.1f} MiB "
             f"({len(p.rss)} samples)"]
    lines += [f"  {'PASS' if v else 'n/a ' if v is None else 'FAIL'}  {name:<12} {figures}" for name, v, figures in p.checks]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=5.0, help="soak time of all policies together")
    ap.add_argument("--policies", default="sarathi,vllm")
    ap.add_argument("--workers", type=int, default=12, help="sessions at a time")
    ap.add_argument("--replay", type=int, default=300, help="completed turns replayed without a cache (0: none)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    policies = tuple(p for p in a.policies.split(",") if p)
    if not a.minutes > 0 or not policies or a.workers < 1 or a.replay < 0:
        print("error: --minutes > 0, at least one policy, --workers >= 1 and --replay >= 0 are needed", file=sys.stderr)
        return 2
    try:
        for p in policies:
            policy_spec(p)
    except ValueError as e:
        print(f"error: --policies: {e}", file=sys.stderr)
        return 2
    s = SoakSettings(60 * a.minutes / len(policies), policies, a.workers, replay=a.replay, seed=a.seed)
    ok = True
    for policy in policies:
        p = soak_policy(s, policy)
        print(report(p, s.seconds_per_policy), flush=True)
        ok &= p.ok
    print("soak: " + ("every check passed" if ok else "a check FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
