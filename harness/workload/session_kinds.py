"""`dataset.sessions` -> a Workload of sessions: where each kind's turn lengths come from
(harness/workload/sessions.py says what the kinds are)."""
from __future__ import annotations

from collections.abc import Mapping

import yaml

from common.errors import HarnessError

from .embedded import sample_embedded
from .lengths import Workload
from .paths import DATA_DIR
from .seeding import LENGTHS, rng_for
from .sessions import SessionDraft, SessionSettings, assemble, drafts_from_distributions, head_picks

CONVERSATION_FIT = "lengths/sharegpt_conversations.yaml"  # relative to data/


def load_sessions(dataset: Mapping, n: int, seed: int, max_total: int | None) -> Workload:
    from harness.typed import typed  # the config's own checks: unknown keys, wrong types

    spec = typed(SessionSettings, dataset["sessions"], "dataset.sessions")
    for k, h in enumerate(spec.head_lengths if spec.system_prompts and max_total is not None else []):
        if h + 2 > max_total:  # a request needs one token of its own and one output token
            raise HarnessError(f"dataset.sessions: system prompt {k} has {h} tokens, longer than the model's context "
                               f"allows (max_total_tokens {max_total}: a request needs its own token and an output)")
    name = str(dataset.get("name"))
    if spec.kind == "conversation" and spec.lengths == "trace":
        from .conversation_trace import conversation_drafts

        if not dataset.get("trace_file"):
            raise HarnessError("dataset.sessions.lengths=trace needs dataset.trace_file (a trace of conversation rounds)")
        drafts, origin = conversation_drafts(spec, dataset["trace_file"], dataset.get("sampling") or "shuffle", seed)
    elif spec.kind == "conversation":
        drafts, origin = drafts_from_distributions(spec, _conversation_fit(), n, seed)
        origin = f"embedded data/{CONVERSATION_FIT} (quantiles of the ShareGPT trace's conversations): {origin}"
    elif spec.kind == "agent":
        drafts, origin = drafts_from_distributions(spec, {}, n, seed)
        origin = f"fitted distributions: {origin}"
    else:
        drafts, origin = _shared_prefix_drafts(spec, n, seed, max_total)
    return assemble(spec, drafts, n, seed, max_total, name, origin)


def _conversation_fit() -> dict:
    path = DATA_DIR / CONVERSATION_FIT
    if not path.is_file():
        raise HarnessError(f"embedded conversation lengths are missing: data/{CONVERSATION_FIT}")
    fit = yaml.safe_load(path.read_text())
    return {k: fit[k] for k in ("turns", "first_user_tokens", "user_tokens", "output_tokens")}


def _shared_prefix_drafts(spec: SessionSettings, n: int, seed: int, max_total: int | None):
    room = None if max_total is None else max_total - max(spec.head_lengths)  # >= 2 (load_sessions)
    prompt, output, origin = sample_embedded(spec.base, n, rng_for(LENGTHS, seed), room)
    drafts = [SessionDraft(h, [(int(p), int(o))]) for h, p, o in zip(head_picks(spec, seed), prompt, output)]
    return drafts, f"each request's own part and output from {spec.base} ({origin}; max_total_tokens {room})"
