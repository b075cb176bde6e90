"""Build a request-length trace from a dataset's source text: tokenize, filter, write CSV + provenance.

Lengths: a request's prompt is counted as the sum of its turns' token counts (each turn tokenized
once, without special tokens) plus the special tokens the tokenizer puts around one sequence
(e.g. BOS); its output as the reply's tokens without special tokens. Tokenizing turns separately
can differ from tokenizing the joined text by a token at each join; it keeps the build linear in
the conversation length instead of quadratic.

Output CSV columns are those of the published traces: num_prefill_tokens, num_decode_tokens,
num_total_tokens, pd_ratio, and conversation_id (the source record: a conversation's rounds share
it, so dataset.sessions can replay them as turns); a `<out>.provenance.yaml` sidecar says how it
was made.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from common.errors import HarnessError

from .sources import RECIPES, load_records
from .tokenizer import load_token_counter

BATCH = 1024


def build_trace(dataset: dict, tokenizer: str, out: Path, source: str | None = None,
                split: str | None = None, limit: int | None = None) -> dict:
    name = dataset.get("name")
    recipe = RECIPES.get(name)
    if recipe is None:
        raise HarnessError(f"no build recipe for dataset {name!r} (known: {', '.join(RECIPES)})")
    counter = load_token_counter(tokenizer)
    records = load_records(recipe, source, split)
    requests = recipe.to_requests(records)
    if limit is not None:
        requests = itertools.islice(requests, limit)

    prompts, outputs, conversations = [], [], []  # token counts a request, its conversation's index
    while chunk := list(itertools.islice(requests, BATCH)):
        # One batched tokenizer call per chunk: all prompt turns and replies together.
        texts = [t for turns, _, _ in chunk for t in turns] + [reply for _, reply, _ in chunk]
        counts = counter.count(texts)
        k = 0
        for turns, _, conversation in chunk:
            prompts.append(counter.specials_per_sequence + sum(counts[k:k + len(turns)]))
            conversations.append(conversation)
            k += len(turns)
        outputs.extend(counts[k:])

    p, o, conv = (np.asarray(x, np.int64) for x in (prompts, outputs, conversations))
    if p.size == 0:
        raise HarnessError(f"source {source or recipe.hf_dataset!r} yielded no requests for {name}")
    max_total = dataset.get("max_total_tokens")
    empty = (o < 1) | (p < 1)
    over = ~empty & (p + o > max_total) if max_total is not None else np.zeros(p.size, bool)
    keep = ~empty & ~over
    p, o, conv = p[keep], o[keep], conv[keep]
    out.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({
        "num_prefill_tokens": p, "num_decode_tokens": o, "num_total_tokens": p + o, "pd_ratio": p / o,
        "conversation_id": conv,  # a request's source record: a conversation's rounds share it (dataset.sessions)
    }).to_csv(out, index=False)

    source_desc = {"hf_dataset": recipe.hf_dataset, "data_files": recipe.data_files, "split": split or recipe.split}
    if source and Path(source).is_file():
        source_desc = {"file": Path(source).name, "sha256": hashlib.sha256(Path(source).read_bytes()).hexdigest()}
    elif source:
        source_desc["hf_dataset"] = source
    stats = {}
    for key, a in (("prompt", p), ("output", o)):
        stats |= {f"{key}_median": float(np.median(a)) if a.size else None,
                  f"{key}_p90": float(np.percentile(a, 90)) if a.size else None}
    prov = {
        "dataset": name, "source": source_desc,
        "tokenizer": {"name": counter.name, "sha256": counter.sha256, "specials_per_sequence": counter.specials_per_sequence},
        "max_total_tokens": max_total, "requests_in_source": int(keep.size),
        "dropped_over_max_total_tokens": int(over.sum()), "dropped_empty": int(empty.sum()),
        "rows_written": int(p.size), "limit": limit, "stats": stats, "built_on": dt.date.today().isoformat(),
        "built_by": "python -m harness.data build", "output_sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
    }
    out.with_name(out.name + ".provenance.yaml").write_text(yaml.safe_dump(prov, sort_keys=False))
    return prov
