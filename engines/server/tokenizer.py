"""A stand-in tokenizer for engines that have no real one (the null and real-time executors).

Benchmarks send prompts as token-id lists, which need no tokenizer. A text prompt (from a plain
OpenAI client, or `vllm bench serve`) is split into words, one token each, hashed into the
vocabulary: the token count is close to a real tokenizer's word count, which is all a timing
twin needs. Output tokens render as a space and one letter, so the text of n tokens re-encodes
to n tokens.
"""
from __future__ import annotations

import re
import zlib

_WORD = re.compile(r"\s*\S+")
_FIRST_ID = 3  # keep clear of <unk>, <s>, </s>


class WordTokenizer:
    def __init__(self, vocab_size: int) -> None:
        if vocab_size <= _FIRST_ID:
            raise ValueError(f"vocab_size must be > {_FIRST_ID}, got {vocab_size}")
        self.vocab_size = vocab_size
        self.eos_token_id = 2

    def encode(self, text: str) -> list[int]:
        span = self.vocab_size - _FIRST_ID
        return [_FIRST_ID + zlib.crc32(w.strip().encode()) % span for w in _WORD.findall(text)]

    def decode_token(self, token_id: int) -> str:
        return " " + chr(97 + token_id % 26)
