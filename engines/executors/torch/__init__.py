"""The torch executor: real forward passes of Llama-family and Falcon models over a paged KV cache
that the engine core's block tables index, with chunked prefills and decodes in one batch, and
tensor / pipeline parallelism over torch.distributed. Importing this package imports torch; the
rest of the project never does so at import time.

Modules: executor (the Executor protocol), model_runner (one rank's step), attention/ (backends
over the paged cache), kv_cache, sampler, plan (what a step asks of the ranks), workers (TP/PP
processes), loop (driving an engine to completion offline).
"""
from engines.executors.torch.executor import PendingStep, TorchExecutor

__all__ = ["PendingStep", "TorchExecutor"]
