"""A server's prefix-cache counters from its Prometheus text (`GET /metrics`), scraped before and
after a probe: the hit rate the server itself measured, beside the one the requests' usage reports.

Counters, in prompt tokens: the in-repo server's `engine:prefix_cache_queries_total` and
`engine:prefix_cache_hits_total`, vLLM's `vllm:prefix_cache_queries_total` and
`vllm:prefix_cache_hits_total` (summed over their label sets). Read outside the run's clock.
"""
from __future__ import annotations

import urllib.request

from common.prometheus import samples

PREFIXES = ("engine:", "vllm:")
QUERIES, HITS = "prefix_cache_queries_total", "prefix_cache_hits_total"


def server_root(base_url: str) -> str:
    """The server's root URL (an endpoint's base URL may end in /v1): where /metrics and /health are."""
    return base_url.rstrip("/").removesuffix("/v1")


def parse_counters(text: str) -> dict[str, float] | None:
    """{queries, hits} summed over every known prefix and label set; None if the server has neither."""
    out = {QUERIES: 0.0, HITS: 0.0}
    seen = False
    for name, _, value in samples(text):
        for prefix in PREFIXES:
            key = name[len(prefix):] if name.startswith(prefix) else None
            if key in out:
                out[key] += value
                seen = True
    return out if seen else None


def scrape_text(base_url: str, headers: dict[str, str] | None = None, timeout_s: float = 5.0) -> str | None:
    """The server's /metrics text now, or None (no /metrics or no answer)."""
    try:
        req = urllib.request.Request(server_root(base_url) + "/metrics", headers=headers or {})
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return None


def scrape(base_url: str, headers: dict[str, str] | None = None, parse=parse_counters):
    """`parse` of the server's /metrics text now (by default the prefix-cache counters; twin_clock.parse_twin: the
    twin's clock), or None (no /metrics, no answer, or none of what `parse` reads)."""
    text = scrape_text(base_url, headers)
    return None if text is None else parse(text)


def measured(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, float] | None:
    """What one probe added: prompt tokens looked up, found, and their ratio."""
    if before is None or after is None:
        return None
    queries, hits = after[QUERIES] - before[QUERIES], after[HITS] - before[HITS]
    return {"queries": queries, "hits": hits, "hit_rate": hits / queries if queries > 0 else float("nan")}
