"""TorchExecutor: the engine core's batches computed by a real model (engines/executors/base.py).

    executor = TorchExecutor.from_config(model="mistral-7b", dtype="float16", device="cuda",
                                         kv_capacity_tokens=None, block_size=16, tp=1, pp=1)
    engine = make_engine(EngineConfig(SchedulerConfig("sarathi"), executor.kv_capacity_tokens, max_model_len))
    executor.add_request(seq_id, prompt_ids, SamplingParams())
    tokens = executor.execute(engine.schedule())   # or submit(batch).result() to pipeline

`model` is a Hugging Face directory (config.json + *.safetensors), a catalog name from
engines.perf.architectures (random weights of that shape), or a ModelConfig. The executor keeps every
request's token ids (prompt + sampled); the core only knows lengths, so a preempted request is
recomputed from these ids. Block ids come from the core's block tables; the executor allocates
exactly kv_capacity_tokens // block_size blocks, as make_engine does (EngineConfig.num_blocks).

With tp * pp == 1 the model runs in this process; otherwise in tp * pp spawned worker processes
over torch.distributed (gloo on CPU, NCCL on GPU), and `submit` lets up to pp micro-batches be
in flight.
"""
from __future__ import annotations

import queue
import random
import socket
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.multiprocessing as mp

from engines.core import Batch
from engines.executors.base import SamplingParams
from engines.executors.torch.plan import StepItem, StepPlan
from engines.models.config import ModelConfig, resolve_model_config

CPU_DEFAULT_KV_TOKENS = 16384
STEP_LOG_LEN = 100_000  # step records kept (a benchmark's iterations; older ones drop off)


@dataclass(frozen=True, slots=True)
class StepRecord:
    """How one iteration ran in this process: `mode` graph | static | eager (graphs.GraphChoice),
    its tokens and the padded size it ran at, why (the graph taken: "decode-only" or "mixed"; or
    why eager), and its prefill chunks."""
    step_id: int
    mode: str
    tokens: int
    padded_tokens: int
    reason: str
    chunks: int = 0
    graph: str | None = None


class PendingStep:
    """A submitted iteration; result() blocks until its tokens are back (one per batch item)."""

    def __init__(self, executor: TorchExecutor, plan: StepPlan, slots: list[int | None],
                 tokens: list[int | None] | None = None) -> None:
        self._executor, self.plan, self._slots, self._tokens = executor, plan, slots, tokens

    def result(self) -> list[int | None]:
        if self._tokens is None:
            self._tokens = self._executor._collect(self.plan)
        return [None if i is None else self._tokens[i] for i in self._slots]


class TorchExecutor:
    def __init__(self, model: str | Path | ModelConfig, *, dtype: str = "auto", device: str = "auto",
                 kv_capacity_tokens: int | None = None, block_size: int = 16, tp: int = 1, pp: int = 1,
                 seed: int = 0, attention_backend: str = "auto", gpu_memory_utilization: float = 0.9,
                 startup_timeout_s: float = 600.0, cuda_graphs: bool = False,
                 graph_sizes: tuple[int, ...] | None = None, compile_elementwise: bool = False,
                 graph_max_seqs: int | None = None) -> None:
        self.config, weights_dir = resolve_model_config(model)
        self.config.check_parallel(tp, pp)
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        if dtype == "auto":
            dtype = "float16" if self.device.type == "cuda" else "float32"
        self.dtype_name = dtype
        self.dtype = getattr(torch, dtype)
        self.block_size, self.tp, self.pp, self.seed = block_size, tp, pp, seed
        self.pipeline_depth = pp  # micro-batches that may be in flight
        self._tokens: dict[int, list[int]] = {}
        self._sampling: dict[int, SamplingParams] = {}
        self._results: dict[int, list[int]] = {}
        self._next_step = 0
        self._runner = None
        self._procs: list = []
        self.step_log: deque[StepRecord] = deque(maxlen=STEP_LOG_LEN)
        self._step_counts: dict[str, int] = {}  # metrics(): steps by path, tokens and padding, since the start
        if tp * pp > 1 and (cuda_graphs or compile_elementwise):
            raise ValueError("cuda_graphs and compile_elementwise run in one process only (tp = pp = 1)")
        if tp * pp == 1:
            from engines.executors.torch.model_runner import ModelRunner

            self._runner = ModelRunner(self.config, dtype=self.dtype, device=self.device, block_size=block_size,
                                       weights_dir=weights_dir, seed=seed, attention_backend=attention_backend,
                                       cuda_graphs=cuda_graphs, graph_sizes=graph_sizes,
                                       compile_elementwise=compile_elementwise, graph_max_seqs=graph_max_seqs)
            measured = self._runner.kv_capacity_tokens(gpu_memory_utilization)
            self.attention_backend = self._runner.backend.name
        else:
            measured = self._start_workers(weights_dir, attention_backend, gpu_memory_utilization, startup_timeout_s)
        if kv_capacity_tokens is None:
            kv_capacity_tokens = measured if self.device.type == "cuda" else CPU_DEFAULT_KV_TOKENS
        self.num_blocks = kv_capacity_tokens // block_size
        if self.num_blocks < 1:
            raise ValueError(f"KV capacity of {kv_capacity_tokens} tokens holds no block of {block_size}")
        self.kv_capacity_tokens = self.num_blocks * block_size
        if self._runner is not None:
            self._runner.allocate_kv(self.num_blocks)
            if self._runner.graphs is not None:
                self._runner.graphs.warm()  # compile and capture every size now, not in the first steps
        else:
            self._broadcast(("alloc", self.num_blocks))

    @classmethod
    def from_config(cls, model: str | Path | ModelConfig, **kwargs) -> TorchExecutor:
        """The constructor the live server calls; keyword arguments as for __init__."""
        return cls(model, **kwargs)

    @property
    def speed_paths(self) -> str:
        """One line: the attention backend, and (one process) the graphs and elementwise paths."""
        out = f"attention {self.attention_backend}"
        if self._runner is not None:
            g = self._runner.graphs
            out += ", cuda graphs off" if g is None else \
                f", cuda graphs at {len(g.sizes)} sizes ({'captured' if g.capture else 'static buffers, no CUDA'})"
            out += f", compiled elementwise {'on' if self._runner.compiled_elementwise else 'off'}"
        return out

    # ------------------------------------------------------------------ Executor protocol
    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self.config.eos_token_ids

    @property
    def max_model_len(self) -> int:
        return self.config.max_position_embeddings

    def add_request(self, seq_id: int, prompt_token_ids: list[int] | None, sampling: SamplingParams) -> None:
        if seq_id in self._tokens:
            raise ValueError(f"request {seq_id} added twice")
        if prompt_token_ids is not None:
            bad = [t for t in prompt_token_ids if not 0 <= t < self.config.vocab_size]
            if bad or not prompt_token_ids:
                raise ValueError(f"request {seq_id}: prompt token ids must be in [0, {self.config.vocab_size}), got {bad[:3]}")
        # None: ids are made up at the first iteration, when the core's prompt_len is known.
        self._tokens[seq_id] = list(prompt_token_ids) if prompt_token_ids is not None else None
        self._sampling[seq_id] = sampling

    def should_stop(self, seq_id: int, token: int | None) -> bool:
        """True when `token` ends the request (an EOS it does not ignore): the caller then calls
        Engine.stop(seq_id) after Engine.complete."""
        sampling = self._sampling.get(seq_id)
        return token is not None and sampling is not None and not sampling.ignore_eos and token in self.eos_token_ids

    def tokens(self, seq_id: int) -> list[int]:
        """Prompt + sampled ids of a live request."""
        return self._tokens[seq_id] or []

    def execute(self, batch: Batch) -> list[int | None]:
        return self.submit(batch).result()

    def submit(self, batch: Batch) -> PendingStep:
        """Start an iteration; with workers it returns at once (pipeline parallelism)."""
        plan, slots = self._plan(batch)
        if not plan.items:  # everything in it was aborted after scheduling
            return PendingStep(self, plan, slots, [])
        if self._runner is not None:
            tokens = self._runner.step(plan)
            c = self._runner.last_choice
            self.step_log.append(StepRecord(plan.step_id, c.mode, c.tokens, c.padded_tokens, c.reason, c.chunks,
                                            c.graph))
            counts = self._step_counts
            for key, n in ((f"torch_steps_{c.mode}_{c.graph}_total" if c.graph else "torch_steps_eager_total", 1),
                           ("torch_step_tokens_total", c.tokens), ("torch_step_padding_tokens_total",
                                                                    c.padded_tokens - c.tokens)):
                counts[key] = counts.get(key, 0) + n
            self._apply(plan, tokens)
            return PendingStep(self, plan, slots, tokens)
        self._broadcast(("step", plan))
        return PendingStep(self, plan, slots)

    def warm_up(self, max_num_seqs: int = 128, max_chunk: int = 512, deadline: float | None = None) -> int:
        """Pay the attention backend's compilations for the shapes such a run meets outside its
        graphs (flex on CUDA; ModelRunner.warm_up) before timing, starting none after `deadline`
        (time.monotonic()); one-process executors only. Shapes run."""
        return self._runner.warm_up(max_num_seqs, max_chunk, deadline) if self._runner is not None else 0

    def metrics(self) -> dict[str, float]:
        """Counters for the server's /metrics (one process): steps by path (graph / static, decode
        / mixed graph; eager), and the tokens the steps computed and padded."""
        return dict(self._step_counts)

    @property
    def attention_shapes(self) -> int:
        """Flex kernel buckets run so far (each compiled once, on CUDA); 0 for other backends."""
        return self._runner.attention_shapes if self._runner is not None else 0

    def free(self, seq_id: int) -> None:
        self._tokens.pop(seq_id, None)
        self._sampling.pop(seq_id, None)
        if self._runner is not None:
            self._runner.free(seq_id)
        elif self._procs:
            self._broadcast(("free", seq_id))

    # ------------------------------------------------------------------ internals
    def _plan(self, batch: Batch) -> tuple[StepPlan, list[int | None]]:
        """The step for the ranks, and for each batch item its index in the step (None for a
        request aborted between schedule and execute: it is not computed)."""
        items, slots = [], []
        for seq, n, ctx in zip(batch.seqs, batch.new_tokens, batch.context_lens):
            ids = self._tokens.get(seq.seq_id, ...)
            if ids is ... and seq.is_finished:
                slots.append(None)
                continue
            if ids is ...:
                raise KeyError(f"request {seq.seq_id} was scheduled but never added to the executor")
            if ids is None:
                ids = self._tokens[seq.seq_id] = self._made_up_prompt(seq.seq_id, seq.prompt_len)
            if ctx + n > len(ids):
                raise ValueError(f"request {seq.seq_id}: batch computes tokens {ctx}..{ctx + n} of {len(ids)} known")
            items.append(StepItem(seq.seq_id, tuple(ids[ctx:ctx + n]), ctx, tuple(seq.block_table),
                                  sample=ctx + n == len(ids), sampling=self._sampling[seq.seq_id]))
            slots.append(len(items) - 1)
        plan = StepPlan(self._next_step, tuple(items))
        self._next_step += 1
        return plan, slots

    def _made_up_prompt(self, seq_id: int, length: int) -> list[int]:
        """Seeded random ids that avoid special tokens (and differ per request, so no prefix cache
        could turn them into hits)."""
        rng = random.Random(self.seed * 1_000_003 + seq_id)
        special = set(self.eos_token_ids) | {self.config.bos_token_id}
        lo = 3 if self.config.vocab_size > 3 else 0
        out = []
        while len(out) < length:
            t = rng.randrange(lo, self.config.vocab_size)
            if t not in special:
                out.append(t)
        return out

    def _apply(self, plan: StepPlan, tokens: list[int | None]) -> None:
        for item, tok in zip(plan.items, tokens):
            ids = self._tokens.get(item.seq_id)
            if tok is not None and ids is not None:  # None ids: aborted while in flight
                ids.append(tok)

    # ------------------------------------------------------------------ worker processes
    def _start_workers(self, weights_dir, attention_backend: str, utilization: float, timeout_s: float) -> int:
        from engines.executors.torch.workers import WorkerSpec, worker_main

        world = self.tp * self.pp
        if self.device.type == "cuda" and torch.cuda.device_count() < world:
            raise ValueError(f"tp * pp = {world} needs {world} GPUs, found {torch.cuda.device_count()}")
        spec = WorkerSpec(self.config, self.dtype_name, self.device.type, self.block_size,
                          str(weights_dir) if weights_dir else None, self.seed, attention_backend, utilization,
                          self.tp, self.pp, f"tcp://127.0.0.1:{_free_port()}",
                          "nccl" if self.device.type == "cuda" else "gloo")
        ctx = _process_context()
        self._results_q = ctx.Queue()
        self._commands = [ctx.Queue() for _ in range(world)]
        for rank in range(world):
            p = ctx.Process(target=worker_main, args=(rank, spec, self._commands[rank], self._results_q), daemon=True)
            p.start()
            self._procs.append(p)
        capacities, backends = [], set()
        deadline = time.monotonic() + timeout_s
        while len(capacities) < world:
            msg = self._get(deadline)
            if msg[0] == "ready":
                capacities.append(msg[2])
                backends.add(msg[3])
        self.attention_backend = ",".join(sorted(backends))
        return min(capacities)

    def _broadcast(self, cmd: tuple) -> None:
        for q in self._commands:
            q.put(cmd)

    def _get(self, deadline: float) -> tuple:
        while True:
            try:
                msg = self._results_q.get(timeout=1.0)
            except queue.Empty:
                dead = [p.pid for p in self._procs if not p.is_alive()]
                if dead:
                    self.close()
                    raise RuntimeError(f"torch executor worker(s) {dead} died") from None
                if time.monotonic() > deadline:
                    self.close()
                    raise TimeoutError("torch executor workers did not answer in time") from None
                continue
            if msg[0] == "error":
                self.close()
                raise RuntimeError(f"torch executor worker {msg[1]} failed:\n{msg[2]}")
            return msg

    def _collect(self, plan: StepPlan) -> list[int | None]:
        deadline = time.monotonic() + 3600.0
        while plan.step_id not in self._results:
            msg = self._get(deadline)
            if msg[0] == "step":
                self._results[msg[1]] = msg[2]
        sampled = iter(self._results.pop(plan.step_id))
        tokens = [next(sampled) if item.sample else None for item in plan.items]
        self._apply(plan, tokens)
        return tokens

    def close(self) -> None:
        procs, self._procs = self._procs, []
        for p in procs:
            if p.is_alive():
                self._commands[procs.index(p)].put(("stop",))
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()

    def __enter__(self) -> TorchExecutor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _process_context():
    """forkserver where available: one server process imports torch once and forks every worker
    from that state (fork-safe: it has started no threads and no CUDA context), so a worker starts
    in a fraction of a second instead of re-importing torch; spawn elsewhere."""
    try:
        ctx = mp.get_context("forkserver")
    except ValueError:
        return mp.get_context("spawn")
    ctx.set_forkserver_preload(["engines.executors.torch.workers", "engines.executors.torch.model_runner"])
    return ctx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
