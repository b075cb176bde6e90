"""How close is the simulator to a real engine on this machine, before and after calibration?

    python benchmarks/bench_validate.py [--engine torch|vllm|both] [--out DIR]

For each engine (the in-repo server's torch executor on a tiny Llama; the managed `vllm serve`
CPU build, with HARNESS_VLLM_PYTHON=VENV/bin/python, on a tiny Llama built by
scripts/make_tiny_model.py): measure a run at one rate and batch limit, `calibrate` on it,
measure a second run at another rate and batch limit, and `validate` the second run with and
without the calibration. Prints the four commands' output in full (the tables quoted in
docs/validate.md). Device numbers are probed (hardware=cpu), and pinned by the calibration.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engines.schedulers import SchedulerConfig  # noqa: E402
from engines.server.config import ServerConfig  # noqa: E402
from harness.backends.live import LiveServerSpec, run_live_result, serve  # noqa: E402
from harness.loadgen import LoadOptions  # noqa: E402
from harness.records import RequestSpec  # noqa: E402
from harness.validate.runfile import write_jsonl  # noqa: E402

BUDGET, MAX_LEN = 256, 1024
RUNS = {"torch": ((16, 4.0, 1), (4, 6.0, 2)), "vllm": ((16, 4.0, 1), (4, 6.0, 2))}  # (max_num_seqs, QPS, seed) x2


def deployment(seqs: int) -> list[str]:
    return ["model.name=tiny-llama", "hardware=cpu", "perf.stack=ideal", "scheduler=sarathi",
            f"scheduler.sarathi.token_budget={BUDGET}", f"scheduler.sarathi.max_num_seqs={seqs}",
            f"max_model_len={MAX_LEN}", "--kv-tokens", "16384"]


def spec(engine: str, seqs: int, model_dir: str | None, log_dir: str) -> LiveServerSpec:
    sched = SchedulerConfig("sarathi", max_num_seqs=seqs, token_budget=BUDGET)
    if engine == "torch":
        return LiveServerSpec(kind="inrepo", scheduler=sched, model="tiny-llama", max_model_len=MAX_LEN,
                              config=ServerConfig(executor="torch", kv_capacity_tokens=16384), ready_timeout_s=120)
    return LiveServerSpec(kind="vllm", scheduler=sched, model=model_dir, served_model_name="tiny", max_model_len=MAX_LEN,
                          vllm_command=(os.environ["HARNESS_VLLM_PYTHON"], "-m", "vllm.entrypoints.openai.api_server"),
                          vllm_extra_args=("--enforce-eager",), ready_timeout_s=300, log_dir=log_dir)


def measure(engine: str, seqs: int, qps: float, seed: int, out: Path, model_dir: str | None) -> Path:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / qps, 60))
    reqs = [RequestSpec(i, float(t[i]), int(rng.integers(32, 384)), int(rng.integers(8, 48))) for i in range(60)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with serve(spec(engine, seqs, model_dir, str(out))) as endpoint:
            # a warm-up run first, discarded: kernels built for each new shape the first time (PyTorch on CPU)
            run_live_result(reqs[:24], endpoint, LoadOptions(progress=False, strict=False, seed=1))
            res = run_live_result(reqs, endpoint, LoadOptions(progress=False, strict=False))
    path = out / f"{engine}_seqs{seqs}_qps{qps:g}.jsonl"
    write_jsonl(path, res.records)
    return path


def harness(*args) -> None:
    print(f"\n$ python -m harness {' '.join(map(str, args))}", flush=True)
    subprocess.run([sys.executable, "-m", "harness", *map(str, args)], cwd=ROOT, check=False)


def loop(engine: str, out: Path) -> None:
    model_dir = None
    if engine == "vllm":
        model_dir = str(out / "tiny-llama")
        subprocess.run([os.environ["HARNESS_VLLM_PYTHON"], str(ROOT / "scripts" / "make_tiny_model.py"), model_dir], check=True,
                       capture_output=True)
    (s1, q1, seed1), (s2, q2, seed2) = RUNS[engine]
    first = measure(engine, s1, q1, seed1, out, model_dir)
    second = measure(engine, s2, q2, seed2, out, model_dir)
    cal = out / f"{engine}_calibration.json"
    print(f"\n=== {engine}: calibrate on {q1:g} QPS, max_num_seqs {s1}; validate at {q2:g} QPS, max_num_seqs {s2} ===")
    harness("calibrate", first, *deployment(s1), "--out", cal)
    harness("validate", second, *deployment(s2), "--out", out / f"{engine}_uncalibrated")
    harness("validate", second, *deployment(s2), f"perf.calibration={cal}", "--out", out / f"{engine}_calibrated")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="both", choices=("torch", "vllm", "both"))
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out = Path(a.out or tempfile.mkdtemp(prefix="bench_validate-"))
    out.mkdir(parents=True, exist_ok=True)
    engines = ["torch", "vllm"] if a.engine == "both" else [a.engine]
    if "vllm" in engines and not os.environ.get("HARNESS_VLLM_PYTHON"):
        print("vllm: skipped (set HARNESS_VLLM_PYTHON=VENV/bin/python: docs/validate.md)")
        engines.remove("vllm")
    for engine in engines:
        loop(engine, out)
    print(f"\nfiles: {out}")


if __name__ == "__main__":
    main()
