"""FlexAttention backend (torch.nn.attention.flex_attention) that reads the paged KV cache in
place: no gather of the cache into per-sequence tensors.

The keys and values handed to flex_attention are the layer's whole cache viewed as one sequence
of physical slots ([1, kv_heads, num_blocks * block_size, head_dim], a view, no copy); the
queries are the step's sequences padded into a batch ([S, heads, Q, head_dim], S and Q rounded
up to shape buckets). The block mask is built from the engine core's block tables, one kv block
per cache page (BLOCK_SIZE = (q_block, block_size)): for each sequence and query tile, the
physical pages it may see, split into pages every query of the tile sees whole (`full`, no mask
evaluated) and pages cut by causality or the sliding window (`partial`). The mask_mod translates a
physical slot back to its position in the sequence through a per-step page table
(physical page -> logical page, -1 when the page is not the sequence's), which is what
torch.nn.attention.experimental._paged_attention does; its allocator is not used because the
blocks are the engine core's.

One call per step for the decodes (Q = 1) and one for the prefill chunks. On CUDA the kernel is
compiled once per (S, Q) bucket (powers of two, `buckets.power_of_two_at_least`; the page lists
are as wide as the model's longest sequence, `max_pages`, which costs no work: the kernel loops
over the listed pages only), so a run meets a few shapes; `warm` pays those compilations before
timing starts. On CPU it runs eagerly: flex's eager path evaluates the mask over every (query,
cache slot) pair, a correctness path with the reference's cost, not a fast one.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from engines.executors.torch.attention.metadata import AttentionMetadata
from engines.executors.torch.buckets import power_of_two_at_least

Q_BLOCK = 128  # flex's default sparse query tile; the Triton kernels' BLOCK_M divides it
MIN_QUERY_BUCKET = 16
MIN_PAGE_BUCKET = 16


def page_width(max_len: int, block_size: int) -> int:
    """Columns of the page lists for sequences of up to `max_len` tokens (one shape for all steps)."""
    return power_of_two_at_least(-(-max_len // block_size), MIN_PAGE_BUCKET)


def _import():
    try:
        from torch.nn.attention.flex_attention import BlockMask, flex_attention
    except Exception:
        return None
    return BlockMask, flex_attention


@dataclass(frozen=True)
class PagedGroup:
    """One flex call: which rows of the step's queries go where in the padded batch."""
    token_rows: torch.Tensor  # [n] rows of the step's q / out
    batch_rows: torch.Tensor  # [n] sequence slot in the padded batch
    query_cols: torch.Tensor  # [n] index within the sequence's new tokens
    batch: int  # S bucket
    queries: int  # Q bucket
    block_mask: object


def paged_mask_tensors(tables: torch.Tensor, num_pages: torch.Tensor, q_start: torch.Tensor, q_len: torch.Tensor,
                       queries: int, block_size: int, window: int | None, num_blocks: int,
                       q_block: int = Q_BLOCK) -> dict[str, torch.Tensor]:
    """The block-sparse mask of a padded batch from its page tables.

    tables [S, P] physical page of each logical page (padding anything), num_pages [S] pages in
    use, q_start [S] position of each sequence's first new token, q_len [S] new tokens (0 for a
    padding row). Returns the BlockMask's kv tensors ([S, 1, tiles, P], int32) and the page
    translation `logical` [S, num_blocks + 1] (the last column absorbs padded table entries).

    With one query a row (decodes) every page is listed partial and no full lists are returned:
    the flex decoding kernel splits the KV across thread blocks by the listed pages only when
    there are no full blocks (with them it splits the whole cache length; torch's
    templates/flex_decode.py.jinja), and a decode's pages are all whole but its last anyway."""
    s, p = tables.shape
    dev = tables.device
    pages = torch.arange(p, device=dev)
    in_use = pages.unsqueeze(0) < num_pages.unsqueeze(1)  # [S, P]
    logical = torch.full((s, num_blocks + 1), -1, dtype=torch.int32, device=dev)
    logical.scatter_(1, torch.where(in_use, tables, num_blocks), torch.where(in_use, pages, -1).int().expand(s, p))
    tiles = -(-queries // q_block)
    first_row = torch.arange(tiles, device=dev) * q_block  # [tiles]
    nonempty = first_row.unsqueeze(0) < q_len.unsqueeze(1)  # [S, tiles]
    last_row = torch.minimum(first_row.unsqueeze(0) + q_block, q_len.unsqueeze(1)) - 1
    lo_q = (q_start.unsqueeze(1) + first_row.unsqueeze(0)).unsqueeze(-1)  # [S, tiles, 1]
    hi_q = (q_start.unsqueeze(1) + last_row).unsqueeze(-1)
    k_lo = (pages * block_size).view(1, 1, p)
    k_hi = k_lo + block_size - 1
    visible = in_use.unsqueeze(1) & nonempty.unsqueeze(-1) & (k_lo <= hi_q)
    whole = k_hi <= lo_q  # every query of the tile is at or after the page's last key
    if window is not None:
        visible &= k_hi > lo_q - window
        whole &= k_lo > hi_q - window
    lists = [("kv", visible)] if queries == 1 else [("kv", visible & ~whole), ("full_kv", visible & whole)]
    pages_of = tables.unsqueeze(1).expand(s, tiles, p)
    out = {"logical": logical}
    for name, sel in lists:
        order = torch.argsort((~sel).to(torch.int8), dim=-1, stable=True)  # selected pages first
        out[f"{name}_num_blocks"] = sel.sum(-1, dtype=torch.int32).unsqueeze(1)
        out[f"{name}_indices"] = pages_of.gather(-1, order).to(torch.int32).unsqueeze(1)
    return out


def paged_mask_mod(logical: torch.Tensor, q_start: torch.Tensor, q_len: torch.Tensor, block_size: int,
                   window: int | None):
    """(b, h, q, k) -> may query q of padded row b see physical cache slot k."""

    def mask_mod(b, h, q_idx, kv_idx):
        page = logical[b, kv_idx // block_size]
        k_pos = page * block_size + kv_idx % block_size
        q_pos = q_start[b] + q_idx
        ok = (page >= 0) & (q_idx < q_len[b]) & (k_pos <= q_pos)
        if window is not None:
            ok = ok & (k_pos > q_pos - window)
        return ok

    return mask_mod


class FlexAttention:
    name = "flex"

    @staticmethod
    def available(device: torch.device, dtype: torch.dtype) -> bool:
        return _import() is not None

    def __init__(self, compiled: bool | None = None) -> None:
        """`compiled`: None compiles on CUDA only; True on any device (on CPU, Inductor's C++ flex
        template, which the tests use to run the sparse page lists through a real kernel)."""
        self._block_mask_cls, self._fn = _import()
        self._compile = compiled
        self._compiled = None
        self.max_pages: int | None = None  # set by the model runner: page_width of the model's length
        self.shapes_seen: set[tuple[int, int, int]] = set()  # (S, Q, pages) buckets run so far

    def _compiles(self, device: torch.device) -> bool:
        return device.type == "cuda" if self._compile is None else self._compile

    def _kernel(self, device: torch.device):
        if not self._compiles(device):
            return self._fn
        if self._compiled is None:
            # One compilation per (S, Q) bucket: more than dynamo's default limit of 8 recompiles.
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 256)
            self._compiled = torch.compile(self._fn, dynamic=False, fullgraph=True)
        return self._compiled

    def block_mask(self, t: dict, q_start: torch.Tensor, q_len: torch.Tensor, block_size: int, window: int | None,
                   queries: int, num_blocks: int):
        """A BlockMask over `paged_mask_tensors`' tensors, which it keeps (not copies): CUDA graphs
        rewrite them in place between replays."""
        full_num, full_idx = t.get("full_kv_num_blocks"), t.get("full_kv_indices")
        dev = t["kv_num_blocks"].device
        if full_num is None and dev.type == "cpu" and self._compiles(dev):
            # Inductor's C++ template (torch 2.13) reads full lists unconditionally: empty ones.
            full_num, full_idx = torch.zeros_like(t["kv_num_blocks"]), torch.zeros_like(t["kv_indices"])
        return self._block_mask_cls.from_kv_blocks(
            t["kv_num_blocks"], t["kv_indices"], full_num, full_idx,
            BLOCK_SIZE=(Q_BLOCK, block_size), mask_mod=paged_mask_mod(t["logical"], q_start, q_len, block_size, window),
            seq_lengths=(queries, num_blocks * block_size),
            compute_q_blocks=False)  # inference only: no transposed (backward) indices

    def group(self, meta: AttentionMetadata, seqs: list[int], num_blocks: int) -> PagedGroup:
        """The padded batch and block mask of the sequences `seqs` of the step."""
        dev = meta.block_tables.device
        bs = meta.block_size
        q_lens = [meta.query_lens[i] for i in seqs]
        n_pages = [-(-meta.kv_lens[i] // bs) for i in seqs]
        batch = power_of_two_at_least(len(seqs))
        queries = 1 if max(q_lens) == 1 else power_of_two_at_least(max(q_lens), MIN_QUERY_BUCKET)
        width = power_of_two_at_least(max(n_pages), MIN_PAGE_BUCKET)
        if self.max_pages is not None and self.max_pages >= width:
            width = self.max_pages
        if dev.type == "cpu" and self._compiles(dev):  # the C++ template wants lists spanning the whole cache
            width = max(width, power_of_two_at_least(num_blocks))
        tables = torch.zeros(batch, width, dtype=torch.long, device=dev)
        cols = min(width, meta.block_tables.shape[1])
        idx = torch.tensor(seqs, dtype=torch.long, device=dev)
        tables[:len(seqs), :cols] = meta.block_tables[idx, :cols]
        pad = [0] * (batch - len(seqs))
        q_start = torch.tensor([meta.context_lens[i] for i in seqs] + pad, dtype=torch.long, device=dev)
        q_len = torch.tensor(q_lens + pad, dtype=torch.long, device=dev)
        num_pages = torch.tensor(n_pages + pad, dtype=torch.long, device=dev)
        t = paged_mask_tensors(tables, num_pages, q_start, q_len, queries, bs, meta.sliding_window, num_blocks)
        block_mask = self.block_mask(t, q_start, q_len, bs, meta.sliding_window, queries, num_blocks)
        starts = meta.query_starts
        rows = [starts[i] + j for i in seqs for j in range(meta.query_lens[i])]
        brow = [b for b, i in enumerate(seqs) for _ in range(meta.query_lens[i])]
        qcol = [j for i in seqs for j in range(meta.query_lens[i])]
        as_t = lambda x: torch.tensor(x, dtype=torch.long, device=dev)  # noqa: E731
        self.shapes_seen.add((batch, queries, width))
        return PagedGroup(as_t(rows), as_t(brow), as_t(qcol), batch, queries, block_mask)

    def warm(self, q_heads: int, k_cache: torch.Tensor, v_cache: torch.Tensor, window: int | None, scale: float,
             shapes: list[tuple[int, int]]) -> None:
        """Run (and on CUDA compile) the buckets of `shapes`, (sequences, new tokens each), over
        the cache's shapes; no cache entry is written."""
        bs, dev = k_cache.shape[1], k_cache.device
        for seqs, tokens in shapes:
            table = [0] * -(-tokens // bs)
            meta = AttentionMetadata.build([tokens] * seqs, [0] * seqs, [table] * seqs, bs, window, scale, dev)
            q = torch.zeros(seqs * tokens, q_heads, k_cache.shape[-1], dtype=k_cache.dtype, device=dev)
            self.forward(q, k_cache, v_cache, meta)

    def _groups(self, meta: AttentionMetadata, num_blocks: int) -> list[PagedGroup]:
        if "flex" not in meta.scratch:
            decodes = [i for i, n in enumerate(meta.query_lens) if n == 1]
            prefills = [i for i, n in enumerate(meta.query_lens) if n > 1]
            meta.scratch["flex"] = [self.group(meta, seqs, num_blocks) for seqs in (decodes, prefills) if seqs]
        return meta.scratch["flex"]

    def run(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, g: PagedGroup,
            scale: float) -> torch.Tensor:
        """flex_attention of one group over the cache; [batch, heads, queries, dim]."""
        hq, d = q.shape[1], q.shape[2]
        padded = q.new_zeros(g.batch, g.queries, hq, d)
        padded[g.batch_rows, g.query_cols] = q[g.token_rows]
        k = k_cache.flatten(0, 1).transpose(0, 1).unsqueeze(0)  # [1, Hk, slots, D], a view of the cache
        v = v_cache.flatten(0, 1).transpose(0, 1).unsqueeze(0)
        options = {"BLOCK_N": k_cache.shape[1]} if q.device.type == "cuda" else None  # a page is the kv tile
        with warnings.catch_warnings():  # eager on CPU on purpose (module docstring): not a mistake to warn of
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            return self._kernel(q.device)(padded.transpose(1, 2), k, v, block_mask=g.block_mask, scale=scale,
                                          enable_gqa=hq != k_cache.shape[2], kernel_options=options)

    def forward(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        out = torch.empty_like(q)
        for g in self._groups(meta, k_cache.shape[0]):
            o = self.run(q, k_cache, v_cache, g, meta.scale)  # [S, H, Q, D]
            out[g.token_rows] = o.transpose(1, 2)[g.batch_rows, g.query_cols].to(q.dtype)
        return out
