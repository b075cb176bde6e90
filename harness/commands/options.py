"""KEY=VALUE options of the commands besides a single experiment, each typed like its default."""
from __future__ import annotations

from common.errors import HarnessError


def parse_options(argv: list[str], defaults: dict) -> dict:
    """KEY=VALUE options (harness.data's parser), each typed like its default."""
    from harness.data.config import parse_args

    out = dict(defaults)
    for key, value in parse_args(argv).items():
        if key not in defaults:
            raise HarnessError(f"unknown option {key}={value}; known: {', '.join(f'{k}=' for k in defaults)}")
        kind = type(defaults[key])
        try:
            out[key] = value.lower() in ("1", "true", "yes") if kind is bool else kind(value)
        except ValueError:
            raise HarnessError(f"{key} must be a {kind.__name__}, got {value!r}") from None
    return out
