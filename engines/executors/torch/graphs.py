"""CUDA graphs for decode-only and small mixed steps: one graph per padded token count,
replayed when a step fits.

Inside a graph every token is a row of its own that attends like a decode: a query at its
position over its sequence's pages (its chunk's earlier tokens are in the cache by then, written
before attention), so one fixed shape serves decodes and short prefill chunks alike. A step of n
tokens runs the graph captured for the smallest capture size >= n (buckets.capture_sizes: vLLM's
rule), its inputs copied into that size's static buffers and the rows past n padded: token 0 at
position 0, its K/V written to a scratch block no sequence owns, no keys visible (q_len 0), its
output dropped. A chunk's tokens each read their context (no reuse between them), which pays only
for short chunks: steps with more than `max_chunk_tokens` prefill tokens, or more tokens than the
largest size, run eagerly. (vLLM captures full graphs for uniform decode batches only and runs
mixed batches' attention outside its piecewise graphs.) Attention inside a graph is the paged
FlexAttention backend over static block-mask tensors (flex.paged_mask_tensors) with a fixed page
width (the model's maximum length), so nothing in the captured work depends on the step's data.

Off on CPU: without CUDA the same static buffers run without capture ("static" in the record),
which is what the CPU tests exercise; capture and replay are behind `torch.cuda.is_available()`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from engines.executors.torch.attention.flex import PagedGroup, page_width, paged_mask_tensors
from engines.executors.torch.buckets import padded_size


@dataclass(frozen=True)
class GraphChoice:
    """How one step ran (the executor's step record): `mode` graph (replayed), static (the padded
    static-buffer path without capture: no CUDA) or eager; tokens before and after padding."""
    mode: str
    tokens: int
    padded_tokens: int
    reason: str


MAX_CHUNK_TOKENS = 16  # prefill tokens a step may carry into a graph (each reads its whole context)


def choose(query_lens: list[int], sizes: tuple[int, ...], enabled: bool, captured,
           max_chunk_tokens: int = MAX_CHUNK_TOKENS) -> GraphChoice:
    """The step's path: padded to a capture size when its tokens fit and its prefill tokens are
    few; replayed when that size has a graph (`captured`), else run over the static buffers."""
    n = sum(query_lens)
    if not enabled:
        return GraphChoice("eager", n, n, "graphs off")
    chunk = sum(q for q in query_lens if q > 1)
    if chunk > max_chunk_tokens:
        return GraphChoice("eager", n, n, f"{chunk} prefill tokens over the graphs' {max_chunk_tokens}")
    size = padded_size(n, sizes)
    if size is None:
        return GraphChoice("eager", n, n, f"{n} tokens over the largest capture size {sizes[-1]}")
    return GraphChoice("graph" if size in captured else "static", n, size, "mixed" if chunk else "decode-only")


class StaticStepBuffers:
    """The inputs of one captured size: token ids, positions, cache slots, and the block mask's
    tensors, a row a token. `fill` rewrites them in place (their storage is what the graph reads)."""

    def __init__(self, size: int, pages: int, num_blocks: int, device: torch.device) -> None:
        self.size, self.pages, self.num_blocks = size, pages, num_blocks
        long = dict(dtype=torch.long, device=device)
        self.tokens = torch.zeros(size, **long)
        self.positions = torch.zeros(size, **long)
        self.slots = torch.zeros(size, **long)
        self.q_start = torch.zeros(size, **long)
        self.q_len = torch.zeros(size, **long)
        i32 = dict(dtype=torch.int32, device=device)
        self.mask = {"logical": torch.full((size, num_blocks + 1), -1, **i32),
                     "kv_num_blocks": torch.zeros(size, 1, 1, **i32),
                     "kv_indices": torch.zeros(size, 1, 1, pages, **i32)}  # one query a row: no full lists

    def fill(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, tables: torch.Tensor,
             block_size: int, window: int | None, pad_slot: int) -> None:
        """Copy a step of m <= size tokens in; pad rows m.. as described above. `tables` [m, >= 1]
        each token's sequence's block table (padded with anything)."""
        m = len(tokens)
        if m > self.size:
            raise ValueError(f"{m} tokens do not fit the buffers of size {self.size}")
        for dst, src, pad in ((self.tokens, tokens, 0), (self.positions, positions, 0), (self.slots, slots, pad_slot),
                              (self.q_start, positions, 0)):
            dst[:m].copy_(src)
            dst[m:].fill_(pad)
        self.q_len[:m].fill_(1)
        self.q_len[m:].zero_()
        dev = self.tokens.device
        cols = min(self.pages, tables.shape[1])
        padded = torch.zeros(self.size, self.pages, dtype=torch.long, device=dev)
        padded[:m, :cols] = tables[:, :cols]
        num_pages = torch.zeros(self.size, dtype=torch.long, device=dev)
        num_pages[:m] = positions // block_size + 1  # pages holding positions 0..the token's own
        fresh = paged_mask_tensors(padded, num_pages, self.q_start, self.q_len, 1, block_size, window, self.num_blocks)
        for name, t in fresh.items():
            self.mask[name].copy_(t)


class _StaticContext:
    """The model's attention context over static buffers: write K/V at the static slots, then
    paged flex attention with the static block mask."""

    def __init__(self, cache, flex, buffers: StaticStepBuffers, block_size: int, window: int | None,
                 scale: float) -> None:
        self.cache, self.flex, self.buffers, self.scale = cache, flex, buffers, scale
        n, dev = buffers.size, buffers.tokens.device
        block_mask = flex.block_mask(buffers.mask, buffers.q_start, buffers.q_len, block_size, window, 1,
                                     buffers.num_blocks)
        rows = torch.arange(n, device=dev)
        self.group = PagedGroup(rows, rows, torch.zeros(n, dtype=torch.long, device=dev), n, 1, block_mask)

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        self.cache.write(layer, self.buffers.slots, k, v)
        k_cache, v_cache = self.cache.layer(layer)
        return self.flex.run(q, k_cache, v_cache, self.group, self.scale)[:, :, 0, :].to(q.dtype)


class StepGraphs:
    """Per capture size: static buffers, the attention context over them, and (CUDA) the graph.
    `cache` must have one block past `num_blocks`: the scratch block padded rows write to."""

    def __init__(self, model, cache, flex, sizes: tuple[int, ...], *, num_blocks: int, block_size: int,
                 window: int | None, scale: float, max_len: int, device: torch.device) -> None:
        if flex.name != "flex":
            raise ValueError(f"CUDA graphs need the paged flex attention backend, not {flex.name!r}")
        self.model, self.cache, self.flex, self.sizes = model, cache, flex, tuple(sorted(sizes))
        self.num_blocks, self.block_size, self.window, self.scale = num_blocks, block_size, window, scale
        self.pages = page_width(max_len, block_size)
        self.device = device
        self.capture = device.type == "cuda" and torch.cuda.is_available()
        self.pad_slot = num_blocks * block_size  # first slot of the scratch block
        self._buffers: dict[int, StaticStepBuffers] = {}
        self._contexts: dict[int, _StaticContext] = {}
        self._graphs: dict[int, object] = {}
        self._outputs: dict[int, torch.Tensor] = {}
        self._pool = None

    def choose(self, query_lens: list[int]) -> GraphChoice:
        return choose(query_lens, self.sizes, True, self._graphs.keys())

    def _prepared(self, size: int) -> StaticStepBuffers:
        if size not in self._buffers:
            buf = StaticStepBuffers(size, self.pages, self.num_blocks + 1, self.device)  # the scratch block too
            self._buffers[size] = buf
            self._contexts[size] = _StaticContext(self.cache, self.flex, buf, self.block_size, self.window,
                                                        self.scale)
        return self._buffers[size]

    @torch.inference_mode()
    def _forward(self, size: int) -> torch.Tensor:
        buf = self._buffers[size]
        return self.model(buf.tokens, buf.positions, self._contexts[size])

    @torch.inference_mode()
    def warm(self) -> None:
        """Compile and (CUDA) capture every size, largest first so smaller graphs share its pool.
        The buffers hold padding only: every row writes the scratch block and sees nothing."""
        for size in sorted(self.sizes, reverse=True):
            buf = self._prepared(size)
            empty = torch.zeros(0, dtype=torch.long, device=self.device)
            buf.fill(empty, empty, empty, torch.zeros(0, 1, dtype=torch.long, device=self.device),
                     self.block_size, self.window, self.pad_slot)
            if not self.capture:
                continue  # nothing to compile or capture: the buffers are ready
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):  # compile and autotune outside the capture
                for _ in range(2):
                    self._forward(size)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                self._outputs[size] = self._forward(size)
            self._pool = graph.pool()
            self._graphs[size] = graph
        if self.capture:
            torch.cuda.synchronize(self.device)

    @torch.inference_mode()
    def run(self, choice: GraphChoice, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
            tables: torch.Tensor) -> torch.Tensor:
        """The step's hidden states [m, hidden] through the padded size `choice` names; `tables`
        a row a token (its sequence's block table)."""
        size = choice.padded_tokens
        buf = self._prepared(size)
        buf.fill(tokens, positions, slots, tables, self.block_size, self.window, self.pad_slot)
        if size in self._graphs:
            self._graphs[size].replay()
            out = self._outputs[size]
        else:
            out = self._forward(size)
        return out[:len(tokens)]
