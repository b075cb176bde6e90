"""Text prompts of exact token counts under a tokenizer the user names (a `tokenizer.json`), for
servers that take text: chat APIs, or any endpoint whose token-id input is not to be trusted.

A prompt of n tokens is n words, each a single token of the vocabulary: words that the
tokenizer encodes, on their own and after a space, as exactly one token. Whitespace
pre-tokenization (byte-level BPE, Metaspace/SentencePiece-style) encodes space-separated words
independently, so the count is exact; every prompt is encoded once more and checked, and a
tokenizer for which that fails is refused with a one-line error. Words are drawn at random per
request (seeded by (seed, request_id)), so prompts share no prefix a cache could reuse.

Only the `tokenizers` package is needed (no transformers, no model hub).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from common.errors import HarnessError
from harness.records import RequestSpec

from .seeding import PROMPTS, check_seed, rng_for
from .tokenizer_file import read_tokenizer_json, tokenizer_json

MIN_WORDS = 64  # a vocabulary with fewer single-token words cannot make varied prompts
TEXT_STREAM = 3  # rng_for sub-stream of text prompts (token-id prompts use 0 and 1)


class TextPrompter:
    """Builds prompts of exactly n tokens (special tokens not counted) under one tokenizer."""

    def __init__(self, path: str | Path) -> None:
        file = tokenizer_json(path)
        if file is None:
            raise HarnessError(f"tokenizer {path}: no such tokenizer.json (give the file or the model directory holding it)")
        self.tok = read_tokenizer_json(file)
        self.source = str(file)
        self.words = self._single_token_words()
        if len(self.words) < MIN_WORDS:
            raise HarnessError(f"tokenizer {file}: only {len(self.words)} words encode as one token; "
                               f"cannot build prompts of exact length")

    def _single_token_words(self) -> list[str]:
        vocab = self.tok.get_vocab()
        ids = sorted(vocab.values())
        texts = self.tok.decode_batch([[i] for i in ids], skip_special_tokens=True)
        candidates = sorted({t.strip() for t in texts if t.strip().isascii() and t.strip().isalpha() and len(t.strip()) >= 2})
        alone = self.tok.encode_batch(candidates, add_special_tokens=False)
        spaced = self.tok.encode_batch([" " + w for w in candidates], add_special_tokens=False)
        return [w for w, a, s in zip(candidates, alone, spaced) if len(a.ids) == 1 and len(s.ids) == 1]

    def text(self, n_tokens: int, rng: np.random.Generator) -> str:
        if n_tokens < 1:
            raise HarnessError(f"a text prompt needs at least one token, got {n_tokens}")
        picks = rng.integers(0, len(self.words), n_tokens)
        return " ".join(self.words[i] for i in picks)

    def texts(self, lengths: Sequence[int], seeds: Sequence[tuple[int, ...]]) -> list[str]:
        out = [self.text(n, rng_for(PROMPTS, *(check_seed(s) for s in seed))) for n, seed in zip(lengths, seeds)]
        counted = [len(e.ids) for e in self.tok.encode_batch(out, add_special_tokens=False)]
        bad = next(((n, c) for n, c in zip(lengths, counted) if n != c), None)
        if bad is not None:
            raise HarnessError(f"tokenizer {self.source}: a prompt built of {bad[0]} one-token words encodes as "
                               f"{bad[1]} tokens; this tokenizer does not split words on spaces")
        return out


def with_prompt_texts(requests: Sequence[RequestSpec], prompter: TextPrompter, seed: int,
                      overhead: int = 0) -> list[RequestSpec]:
    """The same requests with `prompt_text` filled in: `prompt_len - overhead` tokens of text, so
    that with the tokens the server adds (BOS, a chat template: `overhead`) it counts `prompt_len`.
    A prompt not longer than `overhead` cannot be sent at its length: it gets one token of text,
    and its `prompt_len` says what the server will count (callers report how many grew)."""
    lengths = [max(1, r.prompt_len - overhead) for r in requests]
    texts = prompter.texts(lengths, [(seed, TEXT_STREAM, r.request_id) for r in requests])
    return [dataclasses.replace(r, prompt_text=t, prompt_len=n + overhead) for r, t, n in zip(requests, texts, lengths)]
