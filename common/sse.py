"""Server-sent events, split incrementally from the bytes of a streaming response.

Only what a completion stream uses: events separated by a blank line, `data:` lines. The payload
is kept as bytes, so a read loop does no more than split (and timestamp). Here, in `common`,
because both sides of the HTTP stream need it: the load generator (harness/loadgen, which JSON-parses
after the stream ends) and the in-repo router (engines/server/router), which may not import each other.
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
