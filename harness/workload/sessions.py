"""Sessions: workloads whose prompts share prefixes, for prefix caching (`dataset.sessions`).

A session is a sequence of turns. Turn t's prompt is the session's head (one of the shared system
prompts, if any), every earlier turn's user message and answer, and turn t's user message; its
output is turn t's answer. Turn t + 1 is released `think` seconds after turn t's last token
(closed per session); sessions start as the arrival process says (open across sessions), at
qps x sessions / requests, so the request rate offered is `qps` (harness.workload.requests).

Kinds (each a dataset preset with a card under data/cards/):
  conversation   chat: turn lengths from the ShareGPT conversations, rebuilt from a trace of
                 rounds (lengths: trace, dataset.trace_file) or drawn from the embedded tables
                 derived from that trace (lengths: fit, data/lengths/sharegpt_conversations.yaml)
  agent          agent transcripts: a long stable head, a tail growing by a tool output and the
                 agent's short action a step, fitted distributions (no public trace here)
  shared_prefix  single requests behind N system prompts: each request draws one, its own part and
                 output from `base`'s lengths

Token identity: prompts are runs of (segment, tokens) (engines.core.Segments); a session's
messages and answers are segments of their own, the system prompts segments 1..N. `answers: echo`
(the default) makes a turn's generated tokens the answer segment the next turn carries, as a
chat client sends the model's own answer back; `answers: dataset` gives the generated tokens a
segment of their own (the next turn carries the dataset's answer: a live server's output differs).

Too long: a drawn session stops before the turn whose prompt + output passes max_total_tokens
(the turns cut are counted in the workload's provenance); a session of a fixed number of turns
(`turns: N`) that does not fit, or a system prompt that leaves no room for a request, is bad input.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from common.errors import HarnessError

from .distributions import check_spec, describe, draw
from .lengths import Workload
from .seeding import LENGTHS, rng_for

KINDS = ("conversation", "agent", "shared_prefix")
ANSWERS = ("echo", "dataset")
THINK = ("exponential", "fixed")
LENGTH_SOURCES = ("fit", "trace")
THINK_STREAM, PICK_STREAM = 7, 8  # rng_for sub-streams of LENGTHS: think times, system prompt picks
MAX_SESSIONS = 1 << 20  # sessions a workload may draw (cut ones included) before it gives up


@dataclass(frozen=True)
class SessionSettings:
    """`dataset.sessions` (module docstring); distributions as harness.workload.distributions reads them."""

    kind: str = "conversation"
    lengths: str = "fit"  # fit | trace (conversation: sessions rebuilt from dataset.trace_file's rounds)
    turns: Any = None  # turns per session; an integer fixes it (then a session that does not fit is an error)
    first_user_tokens: Any = None  # turn 1's user message (an agent's task)
    user_tokens: Any = None  # each later user message (an agent's tool output)
    output_tokens: Any = None  # each answer (an agent's action)
    think_time_s: float = 5.0  # mean pause between an answer's last token and the next turn
    think: str = "exponential"  # exponential | fixed
    answers: str = "echo"  # echo | dataset
    system_prompts: int = 0  # shared heads; 0: none
    system_prompt_tokens: Any = 0  # one length for all, or one per system prompt
    system_prompt_zipf: float = 0.0  # popularity: head k with weight (k + 1)^-zipf; 0: uniform
    base: str | None = None  # shared_prefix: the dataset whose lengths give each request's own part

    def __post_init__(self) -> None:
        for key, allowed in (("kind", KINDS), ("lengths", LENGTH_SOURCES), ("think", THINK), ("answers", ANSWERS)):
            if getattr(self, key) not in allowed:
                raise ValueError(f"{key} must be one of {', '.join(allowed)}, got {getattr(self, key)!r}")
        t = self.think_time_s
        if isinstance(t, bool) or not isinstance(t, numbers.Real) or not math.isfinite(t) or t < 0:
            raise ValueError(f"think_time_s must be a number >= 0 (seconds), got {t!r}")
        if isinstance(self.system_prompts, bool) or not isinstance(self.system_prompts, int) or self.system_prompts < 0:
            raise ValueError(f"system_prompts must be an integer >= 0, got {self.system_prompts!r}")
        if self.system_prompts and len(self.head_lengths) not in (1, self.system_prompts):
            raise ValueError(f"system_prompt_tokens: one length or {self.system_prompts}, got {self.system_prompt_tokens!r}")
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in self.head_lengths) and self.system_prompts:
            raise ValueError(f"system_prompt_tokens must be integers >= 1, got {self.system_prompt_tokens!r}")
        if not self.system_prompt_zipf >= 0:
            raise ValueError(f"system_prompt_zipf must be >= 0, got {self.system_prompt_zipf!r}")
        if self.kind == "shared_prefix" and (not self.base or not self.system_prompts):
            raise ValueError("kind shared_prefix needs base (a dataset name) and system_prompts >= 1")
        for key in ("turns", "first_user_tokens", "user_tokens", "output_tokens"):
            if getattr(self, key) is not None:
                check_spec(getattr(self, key), key, low=0 if key == "user_tokens" else 1)

    @property
    def head_lengths(self) -> list[int]:
        v = self.system_prompt_tokens
        lengths = list(v) if isinstance(v, list | tuple) else [v]
        return lengths * self.system_prompts if len(lengths) == 1 else lengths


@dataclass(frozen=True, eq=False)
class Sessions:
    """Per request (in session order, a session's turns in order): which session and turn it is,
    the pause before it, what its prompt is made of and what its output is."""

    session: np.ndarray  # int64
    turn: np.ndarray  # int64, 0 for a session's first request
    think_s: np.ndarray  # float64, 0 for first turns
    runs: tuple[tuple[tuple[int, int], ...], ...]  # the prompt as (segment, tokens) runs
    output_segment: np.ndarray  # int64

    @property
    def num_sessions(self) -> int:
        return int(self.session[-1]) + 1 if self.session.size else 0


@dataclass
class SessionDraft:
    """One session's lengths before segments are given: its head (a system prompt index or None)
    and its turns as (user message tokens, answer tokens)."""

    head: int | None
    turns: list[tuple[int, int]] = field(default_factory=list)
    fixed: bool = False  # its turn count was fixed by the config (overflowing is an error)


def assemble(spec: SessionSettings, drafts: Iterable[SessionDraft], n: int, seed: int, max_total: int | None,
             name: str, origin: str) -> Workload:
    """The first `n` turns of `drafts` that fit max_total_tokens, as a Workload with its Sessions."""
    heads = spec.head_lengths if spec.system_prompts else []  # each fits (session_kinds.load_sessions)
    limit = max_total if max_total is not None else math.inf
    think = (np.full(n, float(spec.think_time_s)) if spec.think == "fixed" or spec.think_time_s == 0
             else rng_for(LENGTHS, seed, THINK_STREAM).standard_exponential(n) * spec.think_time_s)
    session, turn, runs, outs, prompt, output = [], [], [], [], [], []
    next_seg = len(heads) + 1  # segments 1..N are the system prompts
    cut_turns = cut_sessions = 0
    first_overflow = None  # sessions of a fixed number of turns must fit whole
    for tried, d in enumerate(drafts):
        if len(prompt) >= n:
            break
        if tried >= MAX_SESSIONS:
            raise HarnessError(f"dataset {name}: {MAX_SESSIONS} sessions drawn, {len(prompt)} of their turns fit "
                               f"max_total_tokens {max_total}; {n} requests asked for")
        history = [(1 + d.head, heads[d.head])] if d.head is not None else []
        used = history[0][1] if history else 0
        for t, (u, a) in enumerate(d.turns):
            if len(prompt) >= n:
                break
            if used + u + a > limit or used + u < 1:
                if d.fixed and first_overflow is None:
                    which = (session[-1] + 1 if session else 0) if t == 0 else session[-1]
                    first_overflow = f"session {which} at turn {t + 1} of {len(d.turns)}"
                cut_turns += len(d.turns) - t
                cut_sessions += 1
                break
            user, answer = (next_seg, u), (next_seg + 1, a)
            next_seg += 2
            mine = (next_seg, a) if spec.answers == "dataset" else answer
            next_seg += spec.answers == "dataset"
            s = session[-1] + (t == 0) if session else 0
            session.append(s)
            turn.append(t)
            runs.append(tuple(history) + ((user,) if u else ()))
            outs.append(mine[0])
            prompt.append(used + u)
            output.append(a)
            history += [user, answer] if u else [answer]
            used += u + a
    if first_overflow is not None:
        raise HarnessError(f"dataset.sessions: {cut_sessions} sessions overflow max_total_tokens {max_total}, first "
                           f"{first_overflow}: {cut_turns} turns would be cut; lower sessions.turns or the lengths, "
                           "or raise max_total_tokens")
    think_s = np.where(np.asarray(turn) > 0, think[:len(turn)], 0.0)
    sessions = Sessions(np.asarray(session, np.int64), np.asarray(turn, np.int64), think_s, tuple(runs),
                        np.asarray(outs, np.int64))
    cut = f"; {cut_turns} turns of {cut_sessions} sessions cut at max_total_tokens {max_total}" if cut_turns else ""
    source = (f"{name}: {spec.kind} sessions, {origin}; {sessions.num_sessions} sessions, {n} requests, think "
              f"{spec.think} {spec.think_time_s:g} s, answers {spec.answers}, {len(heads)} system prompts, seed {seed}{cut}")
    return Workload(np.asarray(prompt), np.asarray(output), source, sessions)


def head_picks(spec: SessionSettings, seed: int) -> Iterator[int | None]:
    """Which system prompt each session uses, session after session (None without system prompts)."""
    if not spec.system_prompts:
        while True:
            yield None
    w = (np.arange(spec.system_prompts) + 1.0) ** -spec.system_prompt_zipf
    rng = rng_for(LENGTHS, seed, PICK_STREAM)
    while True:
        yield from rng.choice(spec.system_prompts, size=4096, p=w / w.sum()).tolist()


def drafts_from_distributions(spec: SessionSettings, defaults: dict, n: int,
                              seed: int) -> tuple[Iterator[SessionDraft], str]:
    """Sessions drawn from the config's distributions (those it leaves unset from `defaults`), as
    many as `assemble` takes (in batches holding n turns each, one seeded stream)."""
    dist = {k: getattr(spec, k) if getattr(spec, k) is not None else defaults.get(k)
            for k in ("turns", "first_user_tokens", "user_tokens", "output_tokens")}
    missing = [k for k, v in dist.items() if v is None]
    if missing:
        raise HarnessError(f"dataset.sessions: {', '.join(missing)} not set (kind {spec.kind} has no default)")
    origin = "; ".join(f"{key} {describe(v)}" for key, v in dist.items())
    return _drawn(spec, dist, n, seed), origin


def _drawn(spec: SessionSettings, dist: dict, n: int, seed: int) -> Iterator[SessionDraft]:
    fixed = isinstance(dist["turns"], int)
    rng = rng_for(LENGTHS, seed)
    heads = head_picks(spec, seed)
    while True:
        turns = draw(dist["turns"], n, rng, "dataset.sessions.turns")  # n sessions hold >= n turns
        turns = turns[:int(np.searchsorted(np.cumsum(turns), n)) + 1]
        total = int(turns.sum())
        firsts = draw(dist["first_user_tokens"], turns.size, rng, "dataset.sessions.first_user_tokens")
        users = draw(dist["user_tokens"], total, rng, "dataset.sessions.user_tokens", low=0)
        answers = draw(dist["output_tokens"], total, rng, "dataset.sessions.output_tokens")
        k = 0
        for c, t in enumerate(turns.tolist()):
            u = [int(firsts[c])] + users[k + 1:k + t].tolist()
            yield SessionDraft(next(heads), list(zip(u, answers[k:k + t].tolist())), fixed)
            k += t
