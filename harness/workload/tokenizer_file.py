"""A tokenizer.json named by the user: the file itself, or a model directory holding one. Read
with the `tokenizers` package only (no transformers, no model hub). Used for text prompts of
exact length (text_prompts.py) and by the trace builder (harness/data/tokenizer.py)."""
from __future__ import annotations

from pathlib import Path

from common.errors import HarnessError


def tokenizer_json(spec: str | Path) -> Path | None:
    """The tokenizer.json that `spec` names (the file, or a directory holding one), if it does."""
    path = Path(spec).expanduser()
    file = path / "tokenizer.json" if path.is_dir() else path
    return file if file.is_file() and file.suffix == ".json" else None


def read_tokenizer_json(file: Path):
    """A `tokenizers.Tokenizer` from a tokenizer.json; one-line errors for what can go wrong."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise HarnessError("reading a tokenizer.json needs the `tokenizers` package: pip install tokenizers") from None
    try:
        return Tokenizer.from_file(str(file))
    except Exception as e:  # the library raises plain Exceptions for malformed files
        raise HarnessError(f"{file}: not a tokenizer.json ({' '.join(str(e).split())})") from None
