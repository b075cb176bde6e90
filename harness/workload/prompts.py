"""Prompt token ids for live runs.

Every request gets its own random ids (seeded), drawn from the vocabulary minus the special
tokens (BOS/EOS/PAD/... would end or confuse generation). The original artifact sent prompts of
one repeated id, which a prefix cache turns into hits and so measures the cache, not the
scheduler. Random ids make a shared 16-token block between two requests a ~vocab^-16 event; the
batch helper also gives every request a different first token (while the vocabulary allows), so
no two prompts of a run share even their first block.
"""
from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Iterable, Sequence

import numpy as np

from common.errors import HarnessError
from harness.records import RequestSpec

from .distributions import number
from .seeding import PROMPTS, check_seed, rng_for


def allowed_ids(vocab_size: int, special_ids: Iterable[int] = ()) -> np.ndarray:
    vocab_size = number(vocab_size, "vocab_size", 1, integer=True)
    ids = np.setdiff1d(np.arange(vocab_size, dtype=np.int64), np.fromiter(special_ids, np.int64))
    if ids.size == 0:
        raise HarnessError(f"every id of a vocabulary of {vocab_size} is special; no prompt ids left")
    return ids


def prompt_token_ids(n_tokens: int, vocab_size: int, seed: int | Sequence[int], special_ids: Iterable[int] = ()) -> tuple[int, ...]:
    """`n_tokens` random non-special ids; `seed` an int or a sequence such as (run_seed, request_id)."""
    seeds = [seed] if isinstance(seed, numbers.Integral) else list(seed)
    return draw_ids(allowed_ids(vocab_size, special_ids), number(n_tokens, "n_tokens", 0, integer=True), seeds)


def draw_ids(ids: np.ndarray, n_tokens: int, seeds: Sequence[int]) -> tuple[int, ...]:
    """`n_tokens` of `ids` drawn at random, seeded by `seeds` (rng_for's sub-streams of PROMPTS)."""
    rng = rng_for(PROMPTS, check_seed(seeds[0]), *(check_seed(s) for s in seeds[1:]))
    return tuple(ids[rng.integers(0, ids.size, n_tokens)].tolist())


def with_prompt_token_ids(requests: Sequence[RequestSpec], vocab_size: int, seed: int,
                          special_ids: Iterable[int] = ()) -> list[RequestSpec]:
    """The same requests with `prompt_token_ids` filled in (request i seeded by (seed, request_id))."""
    ids = allowed_ids(vocab_size, special_ids)
    firsts = rng_for(PROMPTS, check_seed(seed), 0).permutation(ids) if len(requests) <= ids.size else None
    out = []
    for i, r in enumerate(requests):
        toks = draw_ids(ids, r.prompt_len, (seed, 1, r.request_id))
        if firsts is not None and toks:
            toks = (int(firsts[i]),) + toks[1:]
        out.append(dataclasses.replace(r, prompt_token_ids=toks))
    return out
