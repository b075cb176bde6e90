"""From a `ServerConfig` to the parts a server runs: executor, tokenizer, engine.

The torch executor (engines/executors/torch, real forward passes) is imported only when asked
for: the realtime and null executors need no torch, and a machine without it must still serve
the performance-model twin. With it, the model (a Hugging Face directory or a catalog name with
random weights) decides vocabulary, context length and the KV capacity the executor allocated;
a directory's tokenizer.json, when the `tokenizers` package is present, tokenizes text prompts.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from common.errors import HarnessError
from engines.core import Engine
from engines.schedulers import make_engine
from engines.server.config import ServerConfig
from engines.server.tokenizer import WordTokenizer


@dataclass(frozen=True)
class ServingParts:
    engine: Engine
    executor: object
    tokenizer: object
    vocab_size: int
    max_model_len: int
    kv_intake: object = None  # a decode server's KvIntake (handoff.py); None for the other roles


MAX_TWIN_KV_TOKENS = 1 << 20


class ExecutorUnavailable(RuntimeError):
    pass


def _perf_parts(cfg: ServerConfig):
    from engines.perf import Deployment, PerfModel, get_model

    arch = get_model(cfg.model)
    perf = PerfModel(Deployment.create(model=arch, gpu=cfg.gpu, tp=cfg.tp, pp=1, stack=cfg.stack,
                                       attention_kernel=cfg.attention_kernel, weight_dtype=cfg.weight_dtype,
                                       kv_dtype=cfg.kv_dtype))
    return arch, perf


def _torch_executor(cfg: ServerConfig):
    try:
        mod = importlib.import_module("engines.executors.torch")
    except ImportError as e:
        raise ExecutorUnavailable(
            f"--executor torch needs engines.executors.torch and torch, which failed to import ({e}); "
            "use --executor realtime (performance model in real time) or null"
        ) from None
    knobs = dict(cfg.scheduler.knobs)
    max_num_seqs = knobs.get("max_num_seqs") or 128
    step_tokens = knobs.get("token_budget") or knobs.get("max_num_batched_tokens")
    try:
        from engines.executors.torch.buckets import capture_sizes

        executor = mod.TorchExecutor.from_config(
            cfg.model, kv_capacity_tokens=cfg.kv_capacity_tokens, block_size=cfg.block_size, tp=cfg.tp,
            seed=cfg.seed, gpu_memory_utilization=cfg.gpu_memory_utilization,
            attention_backend=cfg.attention_backend, cuda_graphs=cfg.cuda_graphs,
            # vLLM's capture sizes for this policy's sequences and step tokens (buckets.capture_sizes)
            graph_sizes=capture_sizes(max_num_seqs, step_tokens) if cfg.cuda_graphs else None,
            graph_max_seqs=max_num_seqs,
            compile_elementwise=cfg.compile_elementwise,
        )
    except (ValueError, OSError, KeyError) as e:
        raise ExecutorUnavailable(f"--executor torch cannot load model {cfg.model!r}: {e}") from None
    if executor.device.type == "cuda":  # compiled attention buckets before the first request, not in it
        chunk = knobs.get("token_budget") or knobs.get("chunk_size") or 512
        executor.warm_up(max_num_seqs=max_num_seqs, max_chunk=min(chunk, 2048))
    return executor


class _HfTokenizer:
    """A model directory's tokenizer.json through the `tokenizers` package (no transformers)."""

    def __init__(self, path: Path, eos_token_id: int | None) -> None:
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(path))
        self.eos_token_id = eos_token_id

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode_token(self, token_id: int) -> str:
        return self._tok.decode([token_id], skip_special_tokens=False)


def _model_tokenizer(model: str, vocab: int, eos: int | None, named: str | None = None):
    """`named` (--tokenizer: a tokenizer.json or a directory with one) must load; a model
    directory's own tokenizer.json is used when it can be; else one token per word."""
    if named is not None:
        path = Path(named) / "tokenizer.json" if Path(named).is_dir() else Path(named)
        try:
            return _HfTokenizer(path, eos)
        except ImportError:
            raise HarnessError("--tokenizer needs the `tokenizers` package (pip install tokenizers)") from None
        except Exception as e:
            raise HarnessError(f"--tokenizer {named}: cannot load a tokenizer.json from it ({e})") from None
    path = Path(model) / "tokenizer.json"
    if path.exists():
        try:
            return _HfTokenizer(path, eos)
        except ImportError:
            pass
    return WordTokenizer(vocab)


def build_parts(cfg: ServerConfig) -> ServingParts:
    intake = None
    if cfg.executor == "torch":  # never a decode server (config.py)
        executor = _torch_executor(cfg)
        vocab = int(executor.config.vocab_size)
        eos = next(iter(getattr(executor, "eos_token_ids", ()) or ()), None)
        tokenizer = _model_tokenizer(cfg.model, vocab, eos, cfg.tokenizer)
        max_len = cfg.max_model_len or int(executor.max_model_len)
        kv_tokens = int(executor.kv_capacity_tokens)  # what the executor allocated: the core must agree
    else:
        arch, perf = _perf_parts(cfg)
        vocab = arch.vocab_size
        max_len = cfg.max_model_len or arch.max_position_embeddings
        # The KV arithmetic of a tiny model on an 80 GB GPU gives ~10^8 tokens, a free list of
        # millions of blocks held in Python; no benchmark of a twin gets near 2^20 tokens.
        kv_tokens = cfg.kv_capacity_tokens or min(perf.kv_capacity_tokens(cfg.gpu_memory_utilization), MAX_TWIN_KV_TOKENS)
        tokenizer = _model_tokenizer(cfg.model, vocab, None, cfg.tokenizer)
        intake = _kv_intake(cfg, perf.deployment.model) if cfg.role == "decode" else None
        if cfg.executor == "realtime":
            from engines.executors.realtime import RealTimeExecutor

            executor = RealTimeExecutor(perf, vocab, time_scale=cfg.time_scale, seed=cfg.seed)
        else:
            from engines.executors.null import NullExecutor

            executor = NullExecutor(vocab, seed=cfg.seed)
    try:  # the policy's constructor checks its knobs' values
        engine = make_engine(cfg.engine_config(kv_tokens, max_len))
    except ValueError as e:
        raise HarnessError(f"--policy {cfg.policy}: {e}") from None
    return ServingParts(engine, executor, tokenizer, vocab, max_len, intake)


def _kv_intake(cfg: ServerConfig, model):
    """A decode server's pricing of each prompt's KV transfer: the model's KV bytes per token
    over `kv_transfer_lanes` lanes of each named link, as engines.perf.transfer.plan_kv_transfers
    prices the simulator's (config.py refuses the torch executor here)."""
    from engines.perf.links import get_link
    from engines.perf.transfer import KvTransfer
    from engines.server.handoff import KvIntake

    lane_bytes = model.kv_bytes_per_token / cfg.kv_transfer_lanes
    transfers = [KvTransfer(get_link(name), lane_bytes, model.num_layers, cfg.kv_transfer) for name in cfg.kv_links]
    return KvIntake(transfers, cfg.time_scale if cfg.executor == "realtime" else 1.0)
