"""Token counting for the trace builder (optional dependencies, imported only when building).

`tokenizer=PATH` is a tokenizer.json file or a directory holding one (read with the `tokenizers`
package); anything else is handed to `transformers.AutoTokenizer` if that is installed.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from common.errors import HarnessError
from harness.workload.tokenizer_file import read_tokenizer_json, tokenizer_json


@dataclass(frozen=True)
class TokenCounter:
    name: str  # file name or hub id; the sha256 identifies a file (no machine paths)
    sha256: str | None  # of tokenizer.json when read from a file
    count: Callable[[list[str]], list[int]]  # token counts of texts, no special tokens
    specials_per_sequence: int  # tokens the tokenizer adds around one sequence (e.g. BOS)


def load_token_counter(spec: str) -> TokenCounter:
    file = tokenizer_json(spec)
    if file is not None:
        tok = read_tokenizer_json(file)

        def count(texts: list[str]) -> list[int]:
            return [len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)]

        specials = len(tok.encode("", add_special_tokens=True).ids)
        return TokenCounter(file.name, hashlib.sha256(file.read_bytes()).hexdigest(), count, specials)
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise HarnessError(f"tokenizer {spec!r} is not a tokenizer.json file or folder, and `transformers` is not "
                           "installed to load it") from None
    try:
        tok = AutoTokenizer.from_pretrained(spec)
    except Exception as e:
        raise HarnessError(f"cannot load tokenizer {spec!r}: {' '.join(str(e).split())}") from None

    def count_hf(texts: list[str]) -> list[int]:
        return [len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]]

    return TokenCounter(spec, None, count_hf, len(tok("", add_special_tokens=True)["input_ids"]))
