"""Server-sent events, split incrementally from the bytes of a streaming response.

Only what a completion stream uses: events separated by a blank line, `data:` lines. The payload
is kept as bytes; JSON is parsed after the stream ends (tokens.py), so the read loop does no
more than split and timestamp.
"""
from __future__ import annotations


class SseSplitter:
    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The `data` payloads of every event completed by `chunk` (CRLF tolerated)."""
        buf = self._buf + chunk
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        *events, self._buf = buf.split(b"\n\n")
        out = []
        for ev in events:
            data = [line[5:].lstrip(b" ") for line in ev.split(b"\n") if line.startswith(b"data:")]
            if data:
                out.append(b"\n".join(data))
        return out

    @property
    def pending(self) -> bytes:
        return self._buf
