"""Run Vidur (microsoft/vidur) once and write what the harness needs to compare with it.

Run by `benchmarks/bench_vidur.py` with the python of Vidur's own venv, in a Vidur checkout (its
profile paths are relative to it); imports only the standard library and `vidur`, never the
harness. Everything after `--` is Vidur's own command line (`python -m vidur.main` flags).

    cd VIDUR && VIDUR_PY benchmarks/vidur_probe.py --out DIR [--records] -- --replica_config_... ...

Writes into DIR:
  stream.csv    the requests Vidur generated (id, arrived_at, num_prefill_tokens, num_decode_tokens),
                read before the run, so the harness replays exactly Vidur's stream
  requests.csv  per request after the run: first scheduled, prefill completed (= first token),
                completed, restarts (Vidur's preemptions: recompute)
  timing.json   wall and CPU seconds of set-up (profiles read, models trained or loaded from
                Vidur's cache, predictions tabulated) and of the event loop alone, batches run,
                the KV blocks Vidur planned, its batch-size limits
  with --records (hooks that cost loop time: use a separate run for speed):
  batches.csv   one row per batch: scheduled_at, completed_at, requests, prefill and decode tokens,
                KV blocks allocated while it ran, items ("new:processed:decode" per request, space-
                separated: its new tokens, the tokens it had processed before, 1 if a decode)
  tokens.csv    one row per output token: request id, time (the end of the batch that produced it)
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path


def _wall_cpu() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _hook_records(batches: list, tokens: list) -> None:
    """Wrap BatchEndEvent.handle_event to log each batch and the tokens it produced."""
    from vidur.events.batch_end_event import BatchEndEvent

    inner = BatchEndEvent.handle_event

    def handle_event(self, scheduler, metrics_store):
        batch = self._batch
        # (new tokens, tokens processed before, 1 if a decode) per request: what Vidur priced it by
        items = " ".join(f"{n}:{r.num_processed_tokens}:{int(r.is_prefill_complete)}"
                         for r, n in zip(batch.requests, batch.num_tokens))
        allocated = scheduler.get_replica_scheduler(self._replica_id).num_allocated_blocks  # as scheduled
        out = inner(self, scheduler, metrics_store)
        batches.append((batch.scheduled_at, self.time, batch.size, batch.num_prefill_tokens,
                        batch.num_decode_tokens, allocated, items))
        for r in batch.requests:  # a token per request whose prefill is complete after this batch
            if r.is_prefill_complete:
                tokens.append((r.id, self.time))
        return out

    BatchEndEvent.handle_event = handle_event


def _num(x) -> str:
    """A float exactly (numpy scalars too: numpy 2 reprs them as np.float64(...))."""
    return repr(float(x))


def _write_csv(path: Path, header: list[str], rows) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def main() -> None:
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--records", action="store_true", help="log every batch and token (slows the loop)")
    args = ap.parse_args(argv[:split])
    args.out.mkdir(parents=True, exist_ok=True)
    sys.argv = [sys.argv[0], *argv[split + 1:]]  # Vidur reads its flags from sys.argv

    sys.path.insert(0, os.getcwd())  # Vidur runs from its checkout (`python -m vidur.main`), not installed
    w0, c0 = _wall_cpu()
    from vidur.config import SimulationConfig
    from vidur.entities import Batch
    from vidur.simulator import Simulator
    from vidur.utils.random import set_seeds

    config = SimulationConfig.create_from_cli_args()
    set_seeds(config.seed)  # as vidur.main does
    w1, c1 = _wall_cpu()
    sim = Simulator(config)  # reads profiles, trains or loads the predictors, generates the stream
    w2, c2 = _wall_cpu()
    arrivals = sorted((e for _, e in sim._event_queue), key=lambda e: e._request.id)
    stream = [e._request for e in arrivals]
    _write_csv(args.out / "stream.csv", ["id", "arrived_at", "num_prefill_tokens", "num_decode_tokens"],
               [(r.id, _num(r.arrived_at), r.num_prefill_tokens, r.num_decode_tokens) for r in stream])
    batches: list = []
    tokens: list = []
    if args.records:
        _hook_records(batches, tokens)
    batch_id_before = Batch._id
    w3, c3 = _wall_cpu()
    sim.run()
    w4, c4 = _wall_cpu()
    replica = sim.scheduler.get_replica_scheduler(0)
    _write_csv(args.out / "requests.csv",
               ["id", "arrived_at", "scheduled_at", "prefill_completed_at", "completed_at", "completed", "num_restarts"],
               [(r.id, _num(r.arrived_at), _num(r._scheduled_at), _num(r._prefill_completed_at),
                 _num(r._completed_at), int(r.completed), r.num_restarts) for r in stream])
    if args.records:
        _write_csv(args.out / "batches.csv", ["scheduled_at", "completed_at", "size", "prefill_tokens",
                                              "decode_tokens", "allocated_blocks", "items"],
                   [(_num(b[0]), _num(b[1]), *b[2:]) for b in batches])
        _write_csv(args.out / "tokens.csv", ["id", "time"], [(i, _num(t)) for i, t in tokens])
    sched = config.cluster_config.replica_scheduler_config
    timing = {
        "import_wall_s": w1 - w0, "import_cpu_s": c1 - c0,
        "setup_wall_s": w2 - w1, "setup_cpu_s": c2 - c1,
        "loop_wall_s": w4 - w3, "loop_cpu_s": c4 - c3,
        "batches": Batch._id - batch_id_before,
        "num_blocks": sched.num_blocks, "block_size": sched.block_size,
        "batch_size_cap": sched.batch_size_cap,
        "max_tokens_in_batch": getattr(sched, "max_tokens_in_batch", None),
        "chunk_size": getattr(sched, "chunk_size", None),
        "watermark_blocks_fraction": sched.watermark_blocks_fraction,
        "allocated_blocks_at_end": replica.num_allocated_blocks,
        "simulated_end_s": float(sim._time),
        "records": args.records,
        "pid": os.getpid(),
    }
    (args.out / "timing.json").write_text(json.dumps(timing, indent=1))
    sys.stdout.flush()
    os._exit(0)  # skip Vidur's atexit output writer: the numbers above are all the benchmark reads


if __name__ == "__main__":
    main()
