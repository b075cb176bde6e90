"""`backend=endpoint`: a server the harness did not start (harness.backends.endpoint), the schema
of experiments/backend/endpoint.yaml."""
from __future__ import annotations

from dataclasses import dataclass, field

from harness.settings.client import ClientSettings
from harness.settings.load import API_PATHS


@dataclass(frozen=True)
class EndpointSettings(ClientSettings):
    """The schema of experiments/backend/endpoint.yaml."""

    name: str = "endpoint"
    base_url: str = ""  # e.g. http://127.0.0.1:8000/v1 (a trailing /v1 is optional)
    served_model: str | None = None  # the model name to send; None: the one model the server lists
    api_key: str | None = field(default=None, repr=False)  # None: $OPENAI_API_KEY, if set
    vocab_model: str | None = None  # catalog name or model dir for prompt token ids; None: model.name
    ready_timeout_s: float = 10.0  # how long to wait for the server to answer before giving up
    api: str = "completions"  # completions (/v1/completions) | chat (/v1/chat/completions; needs `tokenizer`)
    tokenizer: str | None = None  # the server's tokenizer.json (or its model dir): text prompts of exact length

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"backend.base_url must be an http(s) URL of the server, got {self.base_url!r}")
        if self.api not in API_PATHS:
            raise ValueError(f"backend.api must be one of {', '.join(API_PATHS)}, got {self.api!r}")
        if self.api == "chat" and not self.tokenizer:
            raise ValueError("backend.api=chat sends text: name the server's tokenizer with backend.tokenizer=PATH "
                             "(its tokenizer.json, or the model directory holding it)")
