"""From a `ServerConfig` to the parts a server runs: executor, tokenizer, engine.

The torch executor is imported only when asked for: the realtime and null executors need no
torch, and a machine without it must still serve the performance-model twin. Its module is
expected to expose `make_executor(config: ServerConfig) -> executor`; the executor may carry
`tokenizer` (encode / decode_token / eos_token_id), `vocab_size`, `max_model_len` and
`kv_capacity_tokens`, which then take precedence over the performance model's figures.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from engines.core import Engine
from engines.schedulers import SchedulerConfig, make_engine
from engines.server.config import ServerConfig
from engines.server.tokenizer import WordTokenizer


@dataclass(frozen=True)
class ServingParts:
    engine: Engine
    executor: object
    tokenizer: object
    vocab_size: int
    max_model_len: int


MAX_TWIN_KV_TOKENS = 1 << 20


class ExecutorUnavailable(RuntimeError):
    pass


def _perf_parts(cfg: ServerConfig):
    from engines.perf import Deployment, PerfModel, get_model

    arch = get_model(cfg.model)
    perf = PerfModel(Deployment.create(model=arch, gpu=cfg.gpu, tp=cfg.tp, pp=1))
    return arch, perf


def _torch_executor(cfg: ServerConfig):
    try:
        mod = importlib.import_module("engines.executors.torch")
    except ImportError as e:
        raise ExecutorUnavailable(
            f"--executor torch needs engines.executors.torch and torch, which failed to import ({e}); "
            "use --executor realtime (performance model in real time) or null"
        ) from None
    factory = getattr(mod, "make_executor", None)
    if factory is None:
        raise ExecutorUnavailable("engines.executors.torch has no make_executor(config); it is not ready yet")
    return factory(cfg)


def build_parts(cfg: ServerConfig) -> ServingParts:
    if cfg.executor == "torch":
        executor = _torch_executor(cfg)
        tokenizer = getattr(executor, "tokenizer", None)
        vocab = int(getattr(executor, "vocab_size"))
        tokenizer = tokenizer or WordTokenizer(vocab)
        max_len = cfg.max_model_len or int(getattr(executor, "max_model_len"))
        kv_tokens = cfg.kv_capacity_tokens or int(getattr(executor, "kv_capacity_tokens"))
    else:
        arch, perf = _perf_parts(cfg)
        vocab = arch.vocab_size
        max_len = cfg.max_model_len or arch.max_position_embeddings
        # The KV arithmetic of a tiny model on an 80 GB GPU gives ~10^8 tokens, a free list of
        # millions of blocks held in Python; no benchmark of a twin gets near 2^20 tokens.
        kv_tokens = cfg.kv_capacity_tokens or min(perf.kv_capacity_tokens(cfg.gpu_memory_utilization), MAX_TWIN_KV_TOKENS)
        tokenizer = WordTokenizer(vocab)
        if cfg.executor == "realtime":
            from engines.executors.realtime import RealTimeExecutor

            executor = RealTimeExecutor(perf, vocab, time_scale=cfg.time_scale, seed=cfg.seed)
        else:
            from engines.executors.null import NullExecutor

            executor = NullExecutor(vocab, seed=cfg.seed)
    sched = SchedulerConfig(cfg.policy, cfg.max_num_seqs, cfg.token_budget, cfg.max_num_batched_tokens)
    engine = make_engine(sched, kv_tokens, max_len, cfg.block_size)
    return ServingParts(engine, executor, tokenizer, vocab, max_len)
