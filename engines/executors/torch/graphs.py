"""CUDA graphs for decode-only and mixed steps: graphs captured per padded token count, replayed
when a step fits.

Which sizes, and which graph a step takes, follow vLLM 0.32's default (cudagraph_mode
FULL_AND_PIECEWISE: vllm/config/compilation.py, CompilationConfig.cudagraph_mode; keys in
vllm/v1/cudagraph_dispatcher.py, CudagraphDispatcher.initialize_cudagraph_keys): a graph for
prefill and mixed prefill-decode steps at every capture size (buckets.capture_sizes), and a
decode graph for uniform decode steps; a step of n tokens runs at the smallest capture size >= n,
eagerly when n exceeds the largest. vLLM's mixed graphs are piecewise (attention runs outside
them, between captured pieces); here attention is captured too, over static tensors, so a mixed
graph is one replay. (Decode graphs are captured at sizes up to max_num_seqs, as vLLM's; a decode step padded past it
takes the mixed graph of its size.)

Inside a graph a decode is a row of its own: one query at its position over its sequence's pages
(paged FlexAttention with a fixed page width, the model's maximum length). A mixed graph has those
rows and, beside them, up to `MAX_GRAPH_CHUNKS` prefill chunks, each a padded sequence of
`chunk_queries(size)` queries in a second flex call over the same cache: a chunk of any length up
to the size reads its context once per query tile, as in the eager path. A step with more chunks
runs eagerly. The step's rows are copied into the size's static buffers; rows past the step's
tokens are padding (token 0 at position 0, K/V written to a scratch block no sequence owns, no
key visible, output dropped), and so are unused chunk slots (no query, no page). Nothing in the
captured work depends on the step's data but the contents of those buffers.

Off on CPU: without CUDA the same static buffers run without capture ("static" in the record),
which is what the CPU tests exercise; capture and replay are behind `torch.cuda.is_available()`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from engines.executors.torch.attention.flex import MIN_QUERY_BUCKET, Q_BLOCK, PagedGroup, page_width, paged_mask_tensors
from engines.executors.torch.buckets import padded_size, power_of_two_at_least


@dataclass(frozen=True)
class GraphChoice:
    """How one step ran (the executor's step record): `mode` graph (replayed), static (the padded
    static-buffer path without capture: no CUDA) or eager; tokens before and after padding; why
    ("decode-only" or "mixed"; else why it ran eagerly); its prefill chunks; and which graph's
    buffers it ran through, "decode" or "mixed" (None: eager)."""
    mode: str
    tokens: int
    padded_tokens: int
    reason: str
    chunks: int = 0
    graph: str | None = None


MAX_GRAPH_CHUNKS = 4  # prefill chunks a mixed graph holds (a Sarathi step carries one or two)


def chunk_queries(size: int) -> int:
    """Query rows of each chunk slot in a mixed graph of `size` tokens: a chunk may be the whole step."""
    return power_of_two_at_least(size, MIN_QUERY_BUCKET)


def choose(query_lens: list[int], sizes: tuple[int, ...], enabled: bool, captured,
           max_chunks: int = MAX_GRAPH_CHUNKS) -> GraphChoice:
    """The step's path: padded to the smallest capture size >= its tokens, in the decode graph
    when every sequence brings one token (the mixed graph of that size when it has no decode
    graph, as vLLM's dispatcher falls back to its piecewise graph), else in the mixed graph if it
    has at most `max_chunks` prefill chunks; replayed when that (graph, size) was captured
    (`captured`), else run over the static buffers."""
    n = sum(query_lens)
    chunks = sum(q > 1 for q in query_lens)  # a one-token chunk is a decode-like row
    if not enabled:
        return GraphChoice("eager", n, n, "graphs off", chunks)
    if chunks > max_chunks:
        return GraphChoice("eager", n, n, f"{chunks} prefill chunks over the graphs' {max_chunks}", chunks)
    size = padded_size(n, sizes)
    if size is None:
        return GraphChoice("eager", n, n, f"{n} tokens over the largest capture size {sizes[-1]}", chunks)
    graph = "mixed" if chunks or (("decode", size) not in captured and ("mixed", size) in captured) else "decode"
    return GraphChoice("graph" if (graph, size) in captured else "static", n, size,
                       "mixed" if chunks else "decode-only", chunks, graph)


class StaticStepBuffers:
    """The inputs of one captured graph: token ids, positions, cache slots, and the block masks'
    tensors; the decode rows (a row a token) and, with `chunks` > 0 (a mixed graph), the chunk
    slots and where each token row's output comes from. `fill` rewrites them in place (their
    storage is what the graph reads)."""

    def __init__(self, size: int, pages: int, num_blocks: int, device: torch.device, chunks: int = 0) -> None:
        self.size, self.pages, self.num_blocks, self.chunks = size, pages, num_blocks, chunks
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
        self.queries = chunk_queries(size) if chunks else 0
        if chunks:
            tiles = -(-self.queries // Q_BLOCK)
            self.chunk_src = torch.zeros(chunks * self.queries, **long)  # token row of each (slot, query)
            self.chunk_start = torch.zeros(chunks, **long)
            self.chunk_len = torch.zeros(chunks, **long)
            self.row_from_chunk = torch.zeros(size, dtype=torch.bool, device=device)
            self.row_chunk_pos = torch.zeros(size, **long)  # flat (slot, query) of a chunk row's output
            self.chunk_mask = {"logical": torch.full((chunks, num_blocks + 1), -1, **i32)}
            for name in ("kv", "full_kv"):
                self.chunk_mask[f"{name}_num_blocks"] = torch.zeros(chunks, 1, tiles, **i32)
                self.chunk_mask[f"{name}_indices"] = torch.zeros(chunks, 1, tiles, pages, **i32)

    def fill(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, tables: torch.Tensor,
             block_size: int, window: int | None, pad_slot: int, chunk_rows: list[tuple[int, int]] = ()) -> None:
        """Copy a step of m <= size tokens in; pad rows m.. as described above. `tables` [m, >= 1]
        each token's sequence's block table (padded with anything); `chunk_rows` (start row,
        tokens) of each prefill chunk, which a mixed graph's chunk slots take (the other rows are
        decodes)."""
        m = len(tokens)
        if m > self.size:
            raise ValueError(f"{m} tokens do not fit the buffers of size {self.size}")
        if len(chunk_rows) > self.chunks:
            raise ValueError(f"{len(chunk_rows)} prefill chunks do not fit the buffers' {self.chunks} slots")
        for dst, src, pad in ((self.tokens, tokens, 0), (self.positions, positions, 0), (self.slots, slots, pad_slot),
                              (self.q_start, positions, 0)):
            dst[:m].copy_(src)
            dst[m:].fill_(pad)
        dev = self.tokens.device
        decode = torch.zeros(self.size, dtype=torch.bool, device=dev)
        decode[:m] = True
        for start, n in chunk_rows:
            decode[start:start + n] = False
        self.q_len.copy_(decode.long())
        cols = min(self.pages, tables.shape[1])
        padded = torch.zeros(self.size, self.pages, dtype=torch.long, device=dev)
        padded[:m, :cols] = tables[:, :cols]
        num_pages = torch.where(decode, self.positions // block_size + 1, 0)  # pages holding 0..the token's own
        fresh = paged_mask_tensors(padded, num_pages, self.q_start, self.q_len, 1, block_size, window, self.num_blocks)
        for name, t in fresh.items():
            self.mask[name].copy_(t)
        if self.chunks:
            self._fill_chunks(chunk_rows, padded, block_size, window)

    def _fill_chunks(self, chunk_rows, tables: torch.Tensor, block_size: int, window: int | None) -> None:
        dev, q = self.tokens.device, self.queries
        c = self.chunks
        src = torch.zeros(c, q, dtype=torch.long, device=dev)
        start = torch.zeros(c, dtype=torch.long, device=dev)
        length = torch.zeros(c, dtype=torch.long, device=dev)
        slot_tables = torch.zeros(c, self.pages, dtype=torch.long, device=dev)
        from_chunk = torch.zeros(self.size, dtype=torch.bool, device=dev)
        pos = torch.zeros(self.size, dtype=torch.long, device=dev)
        for i, (row, n) in enumerate(chunk_rows):
            rows = torch.arange(row, row + n, device=dev)
            src[i, :n] = rows
            start[i], length[i] = self.positions[row], n
            slot_tables[i] = tables[row]
            from_chunk[row:row + n] = True
            pos[row:row + n] = i * q + torch.arange(n, device=dev)
        for dst, val in ((self.chunk_src, src.flatten()), (self.chunk_start, start), (self.chunk_len, length),
                         (self.row_from_chunk, from_chunk), (self.row_chunk_pos, pos)):
            dst.copy_(val)
        num_pages = torch.where(length > 0, (start + length - 1) // block_size + 1, 0)
        fresh = paged_mask_tensors(slot_tables, num_pages, start, length, q, block_size, window, self.num_blocks)
        for name, t in fresh.items():
            self.chunk_mask[name].copy_(t)


class _StaticContext:
    """The model's attention context over static buffers: write K/V at the static slots, then
    paged flex attention with the static block masks (decode rows; a mixed graph's chunk slots too)."""

    def __init__(self, cache, flex, buffers: StaticStepBuffers, block_size: int, window: int | None,
                 scale: float) -> None:
        self.cache, self.flex, self.buffers, self.scale = cache, flex, buffers, scale
        n, dev = buffers.size, buffers.tokens.device
        block_mask = flex.block_mask(buffers.mask, buffers.q_start, buffers.q_len, block_size, window, 1,
                                     buffers.num_blocks)
        rows = torch.arange(n, device=dev)
        self.group = PagedGroup(rows, rows, torch.zeros(n, dtype=torch.long, device=dev), n, 1, block_mask)
        self.chunk_group = None
        if buffers.chunks:
            c, q = buffers.chunks, buffers.queries
            mask = flex.block_mask(buffers.chunk_mask, buffers.chunk_start, buffers.chunk_len, block_size, window, q,
                                   buffers.num_blocks)
            self.chunk_group = PagedGroup(buffers.chunk_src, torch.arange(c, device=dev).repeat_interleave(q),
                                          torch.arange(q, device=dev).repeat(c), c, q, mask)

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        self.cache.write(layer, self.buffers.slots, k, v)
        k_cache, v_cache = self.cache.layer(layer)
        out = self.flex.run(q, k_cache, v_cache, self.group, self.scale)[:, :, 0, :]  # [size, H, D]
        if self.chunk_group is not None:
            b = self.buffers
            chunked = self.flex.run(q, k_cache, v_cache, self.chunk_group, self.scale)  # [C, H, Q, D]
            chunked = chunked.transpose(1, 2).flatten(0, 1)[b.row_chunk_pos]  # [size, H, D]
            out = torch.where(b.row_from_chunk[:, None, None], chunked, out)
        return out.to(q.dtype)


class StepGraphs:
    """Per (graph, capture size): static buffers, the attention context over them, and (CUDA) the
    captured graph; graph "decode" (every row a decode) or "mixed" (decode rows and `max_chunks`
    chunk slots). `cache` must have one block past `num_blocks`: the scratch block padded rows write to."""

    def __init__(self, model, cache, flex, sizes: tuple[int, ...], *, num_blocks: int, block_size: int,
                 window: int | None, scale: float, max_len: int, device: torch.device,
                 max_chunks: int = MAX_GRAPH_CHUNKS, max_decode: int | None = None) -> None:
        if flex.name != "flex":
            raise ValueError(f"CUDA graphs need the paged flex attention backend, not {flex.name!r}")
        self.model, self.cache, self.flex, self.sizes = model, cache, flex, tuple(sorted(sizes))
        self.num_blocks, self.block_size, self.window, self.scale = num_blocks, block_size, window, scale
        self.max_chunks, self.max_decode = max_chunks, max_decode
        self.pages = page_width(max_len, block_size)
        self.device = device
        self.capture = device.type == "cuda" and torch.cuda.is_available()
        self.pad_slot = num_blocks * block_size  # first slot of the scratch block
        self._buffers: dict[tuple[str, int], StaticStepBuffers] = {}
        self._contexts: dict[tuple[str, int], _StaticContext] = {}
        self._graphs: dict[tuple[str, int], object] = {}
        self._outputs: dict[tuple[str, int], torch.Tensor] = {}
        self._pool = None

    @property
    def keys(self) -> list[tuple[str, int]]:
        """The graphs warm() captures, largest first: mixed at every size past 1 (a chunk has two
        tokens or more), decode at sizes up to `max_decode` (vLLM: max_num_seqs; None: all)."""
        top = self.max_decode if self.max_decode is not None else self.sizes[-1]
        return [(kind, size) for size in sorted(self.sizes, reverse=True) for kind in ("mixed", "decode")
                if (kind == "decode" and size <= top) or (kind == "mixed" and size > 1 and self.max_chunks)]

    def choose(self, query_lens: list[int]) -> GraphChoice:
        return choose(query_lens, self.sizes, True, self._graphs.keys(), self.max_chunks)

    def _prepared(self, key: tuple[str, int]) -> StaticStepBuffers:
        if key not in self._buffers:
            kind, size = key
            buf = StaticStepBuffers(size, self.pages, self.num_blocks + 1, self.device,  # the scratch block too
                                    self.max_chunks if kind == "mixed" else 0)
            self._buffers[key] = buf
            self._contexts[key] = _StaticContext(self.cache, self.flex, buf, self.block_size, self.window, self.scale)
        return self._buffers[key]

    @torch.inference_mode()
    def _forward(self, key: tuple[str, int]) -> torch.Tensor:
        buf = self._buffers[key]
        return self.model(buf.tokens, buf.positions, self._contexts[key])

    @torch.inference_mode()
    def warm(self) -> None:
        """Compile and (CUDA) capture every graph, largest first so smaller graphs share its pool.
        The buffers hold padding only: every row writes the scratch block and sees nothing.
        Without CUDA nothing is compiled or captured: buffers are made when a step first needs them."""
        if not self.capture:
            return
        empty = torch.zeros(0, dtype=torch.long, device=self.device)
        for key in self.keys:
            buf = self._prepared(key)
            buf.fill(empty, empty, empty, torch.zeros(0, 1, dtype=torch.long, device=self.device),
                     self.block_size, self.window, self.pad_slot)
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):  # compile and autotune outside the capture
                for _ in range(2):
                    self._forward(key)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                self._outputs[key] = self._forward(key)
            self._pool = graph.pool()
            self._graphs[key] = graph
        if self.capture:
            torch.cuda.synchronize(self.device)

    @torch.inference_mode()
    def run(self, choice: GraphChoice, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
            tables: torch.Tensor, chunk_rows: list[tuple[int, int]] = ()) -> torch.Tensor:
        """The step's hidden states [m, hidden] through the graph `choice` names; `tables` a row a
        token (its sequence's block table), `chunk_rows` (start row, tokens) of each prefill chunk."""
        key = (choice.graph, choice.padded_tokens)
        buf = self._prepared(key)
        buf.fill(tokens, positions, slots, tables, self.block_size, self.window, self.pad_slot, chunk_rows)
        if key in self._graphs:
            self._graphs[key].replay()
            out = self._outputs[key]
        else:
            out = self._forward(key)
        return out[:len(tokens)]
