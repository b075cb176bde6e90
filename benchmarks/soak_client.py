"""The soak's client (benchmarks/bench_soak.py): conversation and agent sessions against one
server, prompts as token ids, greedy, some streams cut mid-way; and the server it starts.

A session's next turn carries its whole history, the answer the server generated included (as a
chat client sends it back), so a prefix cache finds every earlier turn. A conversation opens with
one of two shared system prompts, an agent with one of two long shared heads (its tools' schema)
and takes many short steps (a tool's output, a short action). A cut stream ends its session (the
client went away). Everything is drawn from one seed: the same seed sends the same first turns.
"""
from __future__ import annotations

import asyncio
import json
import random
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from common.sse import SseSplitter
from engines.schedulers import policy_spec

ROOT = Path(__file__).resolve().parent.parent
VOCAB = (3, 32000)  # tiny-llama's ids, the specials below 3 left out
KINDS = {  # head tokens, (first message), (later message), (answer), turns at most
    "conversation": (96, (16, 64), (8, 48), (8, 32), 6),
    "agent": (192, (24, 64), (16, 64), (4, 12), 10),
}


@dataclass
class Turn:
    kind: str
    prompt: tuple[int, ...]
    max_tokens: int
    status: int = 0  # HTTP status (0: no answer)
    tokens: list[int] = field(default_factory=list)
    cut: bool = False  # the client closed the stream mid-way
    cached: int = 0  # usage.prompt_tokens_details.cached_tokens (completed streams)
    error: str | None = None

    @property
    def completed(self) -> bool:
        return self.status == 200 and not self.cut and self.error is None and len(self.tokens) == self.max_tokens


def _ids(rng: random.Random, n: int) -> tuple[int, ...]:
    return tuple(rng.randrange(*VOCAB) for _ in range(n))


async def send(http: aiohttp.ClientSession, url: str, prompt: tuple[int, ...], max_tokens: int, kind: str = "",
               cut_after: int | None = None) -> Turn:
    """One greedy streamed completion; with `cut_after`, the connection is closed once that many
    tokens have arrived."""
    turn = Turn(kind, prompt, max_tokens)
    body = {"model": "soak", "prompt": list(prompt), "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    try:
        async with http.post(url + "/v1/completions", json=body) as resp:
            turn.status = resp.status
            if resp.status != 200:
                turn.error = (await resp.text())[:200]
                return turn
            sse = SseSplitter()
            async for chunk in resp.content.iter_any():
                for event in sse.feed(chunk):
                    if event == b"[DONE]":
                        continue
                    obj = json.loads(event)
                    if "error" in obj:
                        turn.error = str(obj["error"].get("message"))[:200]
                    for choice in obj.get("choices") or ():
                        turn.tokens += choice.get("token_ids") or ()
                    details = (obj.get("usage") or {}).get("prompt_tokens_details") or {}
                    turn.cached = int(details.get("cached_tokens", turn.cached))
                if cut_after is not None and len(turn.tokens) >= cut_after:
                    turn.cut = True
                    resp.close()  # the client goes away: the server must abort and free its KV
                    return turn
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        turn.error = f"{type(e).__name__}: {e}"
    return turn


async def session(http: aiohttp.ClientSession, url: str, rng: random.Random, kind: str, heads: list[tuple[int, ...]],
                  max_model_len: int, cut_share: float, deadline: float, out: list[Turn]) -> None:
    _, first, later, answer, turns = KINDS[kind]
    history = rng.choice(heads)
    for t in range(rng.randint(2, turns)):
        message = _ids(rng, rng.randint(*(first if t == 0 else later)))
        n = rng.randint(*answer)
        prompt = history + message
        if len(prompt) + n > max_model_len or time.monotonic() > deadline:
            return
        cut = max(1, n // 2) if rng.random() < cut_share else None
        turn = await send(http, url, prompt, n, kind, cut)
        out.append(turn)
        if not turn.completed:
            return
        history = prompt + tuple(turn.tokens)  # the answer as generated, sent back
        await asyncio.sleep(rng.uniform(0.0, 0.05))  # think


async def drive(url: str, seconds: float, workers: int, seed: int, max_model_len: int, cut_share: float) -> list[Turn]:
    """`workers` sessions at a time, alternating kinds, new ones started until `seconds` pass."""
    rng = random.Random(seed)
    heads = {kind: [_ids(rng, spec[0]) for _ in range(2)] for kind, spec in KINDS.items()}
    out: list[Turn] = []
    deadline = time.monotonic() + seconds

    async def worker(w: int) -> None:
        k = 0
        while time.monotonic() < deadline:
            kind = ("conversation", "agent")[(w + k) % 2]
            await session(http, url, random.Random(seed * 1_000_003 + w * 10_007 + k), kind, heads[kind],
                          max_model_len, cut_share, deadline, out)
            k += 1

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:
        await asyncio.gather(*(worker(w) for w in range(workers)))
    return out


async def replay(url: str, turns: list[Turn], workers: int) -> list[list[int]]:
    """Each turn's prompt sent again, whole (its tokens, `workers` at a time)."""
    gate = asyncio.Semaphore(workers)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:
        async def one(t: Turn) -> list[int]:
            async with gate:
                again = await send(http, url, t.prompt, t.max_tokens)
                return again.tokens if again.completed else [-1]
        return list(await asyncio.gather(*(one(t) for t in turns)))


class Server:
    """`python -m engines.server` with the torch executor, started and stopped by this process."""

    def __init__(self, policy: str, prefix_caching: bool, *, model: str, kv_tokens: int, max_model_len: int,
                 max_num_seqs: int, token_budget: int, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.cmd = [sys.executable, "-m", "engines.server", "--model", model, "--executor", "torch", "--port", str(port),
                    "--max-model-len", str(max_model_len), "--kv-capacity-tokens", str(kv_tokens), "--policy", policy,
                    "--prefix-caching", str(prefix_caching).lower(), "--served-model-name", "soak", "--log-level", "warning"]
        knobs = policy_spec(policy).knob_names  # each policy takes the knobs it has
        self.cmd += ["--max-num-seqs", str(max_num_seqs)] if "max_num_seqs" in knobs else []
        self.cmd += ["--token-budget", str(token_budget)] if "token_budget" in knobs else []
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.TemporaryFile("w+")  # its stderr: a pipe nobody reads would fill and stall it

    def log_tail(self) -> str:
        self.log.seek(0)
        return self.log.read()[-2000:]

    def __enter__(self) -> Server:
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=self.log, text=True)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with status {self.proc.returncode}: {self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("the server did not answer /health within 180 s")

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def metrics(self, audit: bool = False) -> dict[str, float]:
        """engine:* gauges and counters by name (GET /metrics; `audit`: with the KV audit)."""
        with urllib.request.urlopen(self.url + "/metrics" + ("?audit=1" if audit else ""), timeout=30) as r:
            text = r.read().decode()
        return {m.group(1): float(m.group(2)) for m in re.finditer(r"^engine:(\w+)\{[^}]*\} (\S+)$", text, re.M)}

    def idle(self, timeout_s: float = 60.0) -> dict[str, float]:
        """The metrics once nothing runs or waits (aborts and the last streams settled), with the audit."""
        deadline = time.monotonic() + timeout_s
        while True:
            m = self.metrics()
            if (m["num_requests_running"] == 0 and m["num_requests_waiting"] == 0) or time.monotonic() > deadline:
                return self.metrics(audit=True)
            time.sleep(0.2)

    def rss_mib(self) -> float:
        """The server's resident set (Linux /proc), MiB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")
