"""How each paper dataset turns source records into (prompt texts, output text) requests.

openchat_sharegpt4: one request per conversation round. The prompt of round k is the
conversation so far (every earlier turn, human and gpt, plus round k's human turn); the output is
round k's gpt reply. Records hold their turns under `items` (openchat's file) or `conversations`
(other ShareGPT dumps), each turn `{"from": ..., "value": ...}`.

arxiv_summarization: one request per paper; prompt = `article`, output = `abstract`.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from common.errors import HarnessError

USER_ROLES = {"human", "user"}
ASSISTANT_ROLES = {"gpt", "chatgpt", "assistant", "bard", "bing"}


@dataclass(frozen=True)
class Recipe:
    hf_dataset: str
    data_files: str | None
    split: str
    to_requests: "callable"


def sharegpt_rounds(records: Iterable[Mapping]) -> Iterator[tuple[list[str], str, int]]:
    """(prompt turns, reply, conversation index): the conversation's rounds are its turns
    (dataset.sessions rebuilds conversations from the index the trace keeps)."""
    for c, rec in enumerate(records):
        turns = rec.get("items") or rec.get("conversations") or []
        history: list[str] = []
        for i, turn in enumerate(turns):
            role = str(turn.get("from", "")).lower()
            text = turn.get("value") or ""
            if role in ASSISTANT_ROLES and i > 0 and str(turns[i - 1].get("from", "")).lower() in USER_ROLES:
                yield list(history), text, c
            history.append(text)


def arxiv_papers(records: Iterable[Mapping]) -> Iterator[tuple[list[str], str, int]]:
    for c, rec in enumerate(records):
        yield [rec.get("article") or ""], rec.get("abstract") or "", c


RECIPES = {
    "openchat_sharegpt4": Recipe("openchat/openchat_sharegpt4_dataset", "sharegpt_gpt4.json", "train", sharegpt_rounds),
    "arxiv_summarization": Recipe("ccdv/arxiv-summarization", None, "train", arxiv_papers),
}


def load_records(recipe: Recipe, source: str | None, split: str | None):
    """Records via `datasets` (optional import): a local JSON/JSONL file, or the recipe's hub id."""
    try:
        import datasets
    except ImportError:
        raise HarnessError("building a trace needs the `datasets` package: pip install datasets") from None
    try:
        if source and Path(source).is_file():
            return datasets.load_dataset("json", data_files=str(source), split="train")
        hub_id = source or recipe.hf_dataset
        return datasets.load_dataset(hub_id, data_files=recipe.data_files if not source else None, split=split or recipe.split)
    except Exception as e:  # datasets raises many types (network, format); report in one line
        raise HarnessError(f"cannot load source {source or recipe.hf_dataset!r}: {' '.join(str(e).split())[:300]}") from None
