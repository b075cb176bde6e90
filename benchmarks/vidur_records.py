"""Per-iteration records of the harness and of Vidur on the same stream, and where they differ.

Used by benchmarks/bench_vidur.py (--records DIR, --no-cpu-costs). The harness's side is its own
event loop (harness.backends.sim.simulate) stepped one iteration at a time (fast_forward off:
the same run, exactly, checked by the caller) with each iteration logged through the loop's own
iteration-log hook and the KV blocks each batch ran with; Vidur's side is what
benchmarks/vidur_probe.py --records wrote. The comparison separates the two ways end-to-end
numbers can part: what each scheduler put in its batches (composition, KV pool and its use), and
what one batch costs (Vidur's batches priced by the harness's model: the same batch, two prices).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

import harness.backends.sim.loop as sim_loop
from engines.core.engine import Engine
from engines.perf.cpu_costs import CPU_FIELDS
from engines.perf.factory import build_perf_model
from engines.schedulers import EngineConfig, make_engine
from harness.records import RequestRecord, RequestSpec
from harness.experiment import ExperimentPlan

ITERATION_COLUMNS = ["scheduled_at", "completed_at", "size", "prefill_tokens", "decode_tokens", "allocated_blocks", "items"]


def without_cpu_costs(plan: ExperimentPlan, perf_cfg) -> ExperimentPlan:
    """The plan with its iterations priced without the engine's CPU costs (cpu_costs.py), as
    Vidur's default run prices them (skip_cpu_overhead_modeling: true), by the model `perf_cfg`
    (the config's perf group) names; KV pool unchanged."""
    d = plan.deployment
    perf = build_perf_model(d.perf.deployment.with_changes(**dict.fromkeys(CPU_FIELDS, 0.0)), perf_cfg)
    return replace(plan, deployment=replace(d, perf=perf, timer=perf))


class _Iterations:
    """The loop's iteration log (simulate(log=...)): start, end and batch of every stepped iteration."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []

    def bind(self, order) -> None:
        pass

    def iteration(self, batch, start: float, end: float, gaps=None, price: bool = True) -> None:
        self.rows.append((start, end, batch))

    def decode_run(self, batch, starts, ends) -> None:
        raise AssertionError("a decode run in a run stepped one iteration at a time")


class _CountingBlocks(Engine):
    """The engine, counting the KV blocks each batch ran with, before its completion frees any. A
    subclass, not a patched method: the compiled engine core's instances take no new methods
    (engines/compiled.py)."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.used: list[int] = []

    def complete(self, batch):
        self.used.append(self.blocks.num_used)
        return super().complete(batch)


def harness_iterations(plan: ExperimentPlan, scheduler: str,
                       requests: list[RequestSpec]) -> tuple[pd.DataFrame, list[RequestRecord]]:
    """The harness's run of `requests`, one row per iteration (ITERATION_COLUMNS; allocated_blocks
    while it runs; items "new:context:decode" per sequence, decode 1 or 0), and its records."""
    d = plan.deployment
    made = make_engine(EngineConfig(plan.schedulers[scheduler], d.kv_capacity_tokens, plan.max_model_len, d.block_size))
    assert type(made) is Engine, f"{type(made).__name__}: the iteration log counts a plain engine's blocks"
    engine = _CountingBlocks(made.policy, made.blocks, made.max_model_len, made.policy_name)
    used = engine.used
    log = _Iterations()
    records = sim_loop.simulate(requests, engine, d.timer, pp=d.pp, fast_forward=False,
                                time_limit_s=plan.search.time_limit_s, log=log)
    frame = pd.DataFrame([
        (start, end, len(b), b.num_prefill_tokens, b.num_decodes, blocks,
         " ".join(f"{n}:{c}:{int(not p)}" for n, c, p in zip(b.new_tokens, b.context_lens, b.is_prefill)))
        for (start, end, b), blocks in zip(log.rows, used, strict=True)], columns=ITERATION_COLUMNS)
    return frame, records


def _items(text: str) -> np.ndarray:
    """An items cell as rows of (new tokens, tokens before, decode)."""
    return np.array([p.split(":") for p in text.split()], dtype=np.int64)


def price_vidur_batches(plan: ExperimentPlan, batches: pd.DataFrame) -> np.ndarray:
    """The harness's price of each of Vidur's batches (vidur_probe's items). Vidur counts a
    request's first output token as processed when its prefill ends, so a decode's processed count
    is one more than the KV it reads (the harness's context); prefill chunks read what they count."""
    timer = plan.deployment.timer
    out = np.empty(len(batches))
    for k, text in enumerate(batches["items"]):
        new, processed, decode = _items(text).T
        out[k] = float(timer.batch_times(new, processed - decode))
    return out


def _shape(frame: pd.DataFrame, block_size: int) -> dict[str, float]:
    dt = frame["completed_at"] - frame["scheduled_at"]
    mixed = frame["prefill_tokens"] > 0
    return {
        "iterations": len(frame),
        "with a prefill": int(mixed.sum()),
        "mean requests a batch": frame["size"].mean(),
        "mean decodes a batch": frame["decode_tokens"].mean(),
        "mean prefill tokens (prefill batches)": frame.loc[mixed, "prefill_tokens"].mean(),
        "mean ms (decode-only)": 1e3 * dt[~mixed].mean(),
        "mean ms (with a prefill)": 1e3 * dt[mixed].mean(),
        "busy s": dt.sum(),
        "peak KV tokens in use": frame["allocated_blocks"].max() * block_size,
        "mean KV tokens in use": frame["allocated_blocks"].mean() * block_size,
    }


def compare_iterations(plan: ExperimentPlan, perf_cfg, scheduler: str, vidur_dir: Path, out_dir: Path) -> None:
    """Print both sides' batch shapes and the two prices of Vidur's batches; write Vidur's batches
    with the harness's prices to out_dir (the harness's iterations are written by the caller)."""
    vidur = pd.read_csv(vidur_dir / "batches.csv")
    harness = pd.read_csv(out_dir / f"harness_{scheduler}_iterations.csv")
    bs = plan.deployment.block_size
    left, right = _shape(vidur, bs), _shape(harness, bs)
    print(f"  per-iteration records ({scheduler}):{'Vidur':>16}{'harness':>12}")
    for k in left:
        print(f"    {k:<38}{left[k]:>12.1f}{right[k]:>12.1f}")
    vidur_s = (vidur["completed_at"] - vidur["scheduled_at"]).to_numpy()
    vidur["harness_s"] = price_vidur_batches(plan, vidur)
    vidur["harness_no_cpu_s"] = price_vidur_batches(without_cpu_costs(plan, perf_cfg), vidur)
    vidur.to_csv(out_dir / f"vidur_{scheduler}_batches.csv", index=False)
    mixed = (vidur["prefill_tokens"] > 0).to_numpy()
    print("    Vidur's own batches priced by the harness (harness / Vidur, median [P10, P90]):")
    for label, col in (("as configured", "harness_s"), ("without CPU costs", "harness_no_cpu_s")):
        for kind, sel in (("decode-only", ~mixed), ("with a prefill", mixed)):
            r = vidur[col].to_numpy()[sel] / vidur_s[sel]
            if r.size:
                q = np.quantile(r, [0.5, 0.1, 0.9])
                print(f"      {label:<20}{kind:<16}{q[0]:>6.2f} [{q[1]:.2f}, {q[2]:.2f}]   "
                      f"sum {vidur[col].to_numpy()[sel].sum() / vidur_s[sel].sum():.2f}")
