"""One rank's model runner: turns a StepPlan into tensors, runs this rank's pipeline stage over
the paged KV cache, and (last stage, TP rank 0) samples. The executor drives one runner in its
own process (tp = pp = 1) or one per worker process (workers.py)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from engines.executors.torch.attention import AttentionMetadata, select_backend
from engines.executors.torch.attention.flex import MIN_QUERY_BUCKET, page_width
from engines.executors.torch.buckets import capture_sizes, powers_of_two
from engines.executors.torch.graphs import GraphChoice, StepGraphs, choose
from engines.executors.torch.kv_cache import PagedKVCache
from engines.executors.torch.plan import StepPlan
from engines.executors.torch.sampler import Sampler
from engines.models import ModelConfig, build_model
from engines.models.parallel import get_parallel


@dataclass
class StepInputs:
    tokens: torch.Tensor  # [T] token ids
    positions: torch.Tensor  # [T]
    meta: AttentionMetadata
    sample_rows: torch.Tensor  # [S'] row of each sampling sequence's last token
    sample_items: list  # the StepItems that sample


class _Context:
    """What the model's attention layers call: store this step's K/V, then attend."""

    def __init__(self, cache: PagedKVCache, backend, meta: AttentionMetadata) -> None:
        self.cache, self.backend, self.meta = cache, backend, meta

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        self.cache.write(layer, self.meta.slot_mapping, k, v)
        k_cache, v_cache = self.cache.layer(layer)
        return self.backend.forward(q, k_cache, v_cache, self.meta)


class ModelRunner:
    """`cuda_graphs`: decode-only and mixed steps (up to graphs.MAX_GRAPH_CHUNKS prefill chunks)
    through graphs.StepGraphs (paged flex attention; one process only), padded to `graph_sizes`
    (default: vLLM's rule for `graph_max_seqs`, else 128, sequences; decode graphs at sizes up to
    `graph_max_seqs`, as vLLM's); on CPU the padded static-buffer path without capture. `compile_elementwise`:
    torch.compile the norm, rotary and SiLU-gate functions (engines.models.layers.fused)."""

    def __init__(self, config: ModelConfig, *, dtype: torch.dtype, device: torch.device, block_size: int,
                 weights_dir=None, seed: int = 0, attention_backend: str = "auto", cuda_graphs: bool = False,
                 graph_sizes: tuple[int, ...] | None = None, compile_elementwise: bool = False,
                 graph_max_seqs: int | None = None) -> None:
        self.config, self.dtype, self.device, self.block_size = config, dtype, device, block_size
        self.parallel = get_parallel()
        self.model = build_model(config, dtype=dtype, device=device, weights_dir=weights_dir, seed=seed)
        tp = self.parallel.tp_size
        self.kv_heads = max(1, config.num_kv_heads // tp)
        self.backend = select_backend(attention_backend, device, dtype, num_heads=config.num_heads // tp,
                                      num_kv_heads=self.kv_heads, head_dim=config.head_dim,
                                      window=config.sliding_window)
        self.sampler = Sampler(seed)
        self.cache: PagedKVCache | None = None
        if cuda_graphs and (self.parallel.tp_size > 1 or self.parallel.pp_size > 1):
            raise ValueError("CUDA graphs run in one process only (tp = pp = 1)")
        if cuda_graphs and self.backend.name != "flex":
            raise ValueError(f"CUDA graphs need attention_backend='flex', not {self.backend.name!r}")
        self.graph_sizes = tuple(graph_sizes) if graph_sizes else capture_sizes(graph_max_seqs or 128)
        self.graph_max_seqs = graph_max_seqs
        self.graphs: StepGraphs | None = None
        self._graphs_wanted = cuda_graphs
        self.last_choice: GraphChoice | None = None
        self.compiled_elementwise = compile_elementwise
        if compile_elementwise:
            from engines.models.layers.fused import compile_elementwise as fuse

            fuse(self.model)
        self.samples = self.parallel.is_last_stage and self.parallel.tp_rank == 0

    # ------------------------------------------------------------------ memory
    def kv_bytes_per_token(self) -> int:
        return PagedKVCache.bytes_per_token(self.model.num_local_layers, self.kv_heads, self.config.head_dim, self.dtype)

    def kv_capacity_tokens(self, memory_utilization: float, activation_tokens: int = 4096) -> int:
        """Tokens of KV cache that fit in this device's free memory (CUDA), after reserving
        activations for an `activation_tokens`-token forward pass; None-like 0 on CPU."""
        if self.device.type != "cuda":
            return 0
        torch.cuda.synchronize(self.device)
        free, total = torch.cuda.mem_get_info(self.device)
        used_elsewhere = total - free
        c = self.config
        tp = self.parallel.tp_size
        width = 4 * c.hidden_size + (c.q_size + 2 * c.kv_size) // tp + 3 * c.intermediate_size // tp
        act = activation_tokens * width * torch.empty((), dtype=self.dtype).element_size()
        act += 256 * c.vocab_size * 4  # fp32 logits of up to 256 sampled rows
        budget = total * memory_utilization - used_elsewhere - act
        return max(0, int(budget // self.kv_bytes_per_token()))

    def allocate_kv(self, num_blocks: int) -> None:
        """With graphs, one block more than the core's: the scratch block padded rows write to."""
        extra = 1 if self._graphs_wanted else 0
        self.cache = PagedKVCache(self.model.num_local_layers, num_blocks + extra, self.block_size, self.kv_heads,
                                  self.config.head_dim, self.dtype, self.device)
        if self.backend.name == "flex":
            self.backend.max_pages = page_width(self.config.max_position_embeddings, self.block_size)
        if self._graphs_wanted:
            c = self.config
            self.graphs = StepGraphs(self.model, self.cache, self.backend, self.graph_sizes, num_blocks=num_blocks,
                                     block_size=self.block_size, window=c.sliding_window, scale=c.head_dim ** -0.5,
                                     max_len=c.max_position_embeddings, device=self.device,
                                     max_decode=self.graph_max_seqs)

    def warm_up(self, max_num_seqs: int, max_chunk: int, deadline: float | None = None) -> int:
        """Compile the flex attention buckets a run of up to `max_num_seqs` sequences and
        `max_chunk`-token chunks meets most outside any graph (decodes of every power-of-two batch
        that no decode graph takes; up to four prefill chunks of every power-of-two length), so
        compilation is paid here, not in timed steps (a step with more prefill chunks compiles its
        bucket when it first comes); none is started after `deadline` (time.monotonic()). How many
        shapes ran (0: another backend, nothing to compile)."""
        import time

        if self.backend.name != "flex" or self.cache is None:
            return 0
        in_graphs = 0
        if self.graphs is not None:  # decode steps up to the largest decode graph never run eagerly
            in_graphs = max((size for graph, size in self.graphs.keys if graph == "decode"), default=0)
        shapes = [(b, 1) for b in powers_of_two(1, max_num_seqs) if b > in_graphs]
        chunks = powers_of_two(MIN_QUERY_BUCKET, max_chunk)
        shapes += [(s, q) for s in powers_of_two(1, min(4, max_num_seqs)) for q in chunks]
        k_cache, v_cache = self.cache.layer(0)
        c = self.config
        done = 0
        with torch.inference_mode():
            for shape in shapes:
                if deadline is not None and time.monotonic() > deadline:
                    break
                self.backend.warm(c.num_heads // self.parallel.tp_size, k_cache, v_cache, c.sliding_window,
                                  c.head_dim ** -0.5, [shape])
                done += 1
        return done

    @property
    def attention_shapes(self) -> int:
        """Compiled-kernel buckets the flex backend has run so far (0 for other backends)."""
        return len(getattr(self.backend, "shapes_seen", ()))

    # ------------------------------------------------------------------ one step
    def prepare(self, plan: StepPlan) -> StepInputs:
        tokens, positions, rows, sample_items = [], [], [], []
        for item in plan.items:
            tokens.extend(item.token_ids)
            positions.extend(range(item.context_len, item.context_len + item.num_tokens))
            if item.sample:
                rows.append(len(tokens) - 1)
                sample_items.append(item)
        meta = AttentionMetadata.build(
            [i.num_tokens for i in plan.items], [i.context_len for i in plan.items],
            [i.block_table for i in plan.items], self.block_size, self.config.sliding_window,
            self.config.head_dim ** -0.5, self.device)
        dev = self.device
        return StepInputs(torch.tensor(tokens, dtype=torch.long, device=dev),
                          torch.tensor(positions, dtype=torch.long, device=dev), meta,
                          torch.tensor(rows, dtype=torch.long, device=dev), sample_items)

    @torch.inference_mode()
    def forward(self, inputs: StepInputs, hidden_in: torch.Tensor | None = None) -> torch.Tensor:
        """This stage's output: [T, hidden] (normalized on the last stage)."""
        x = inputs.tokens if hidden_in is None else hidden_in
        return self.model(x, inputs.positions, _Context(self.cache, self.backend, inputs.meta))

    @torch.inference_mode()
    def logits(self, inputs: StepInputs, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of the sampling rows only (a non-final prefill chunk needs no LM head)."""
        return self.model.compute_logits(hidden.index_select(0, inputs.sample_rows))

    def sample(self, inputs: StepInputs, hidden: torch.Tensor) -> list[int] | None:
        """Token per sampling item on the sampling rank; None on other ranks. Every TP rank of the
        last stage must call it (the LM head all-gathers)."""
        if not inputs.sample_items:
            return [] if self.samples else None
        logits = self.logits(inputs, hidden)
        if not self.samples:
            return None
        items = inputs.sample_items
        return self.sampler(logits, [i.seq_id for i in items], [i.sampling for i in items])

    def step(self, plan: StepPlan) -> list[int | None]:
        """Single-process step (tp = pp = 1): one entry per plan item. `last_choice` says how it
        ran (graph, static or eager, and the padding)."""
        inputs = self.prepare(plan)
        lens = inputs.meta.query_lens
        choice = self.graphs.choose(lens) if self.graphs else choose(lens, self.graph_sizes, False, ())
        self.last_choice = choice
        if choice.mode == "eager":
            hidden = self.forward(inputs)
        else:
            m = inputs.meta
            seq_of_token = torch.repeat_interleave(torch.arange(m.num_seqs, device=self.device),
                                                   torch.tensor(lens, device=self.device),
                                                   output_size=len(inputs.tokens))  # each token's sequence
            chunks = [(start, n) for start, n in zip(m.query_starts, lens) if n > 1]
            hidden = self.graphs.run(choice, inputs.tokens, inputs.positions, m.slot_mapping,
                                     m.block_tables[seq_of_token], chunks)
        tokens = iter(self.sample(inputs, hidden))
        return [next(tokens) if item.sample else None for item in plan.items]

    def free(self, seq_id: int) -> None:
        self.sampler.free(seq_id)
