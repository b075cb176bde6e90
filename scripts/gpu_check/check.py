"""The GPU check: the in-repo torch engine on a GPU in one call, one table (issue 53).

    python scripts/gpu_check                  # on the GPU machine: all phases, < 8 minutes on an H100
    python scripts/gpu_check --tiny           # the same pipeline on CPU with a tiny model
    python scripts/gpu_check --configs eager,graphs --qps 6 --budget-s 300 --out DIR

Phases, each given a share of --budget-s (a phase that ends early leaves its time to the later
ones; what is left out when time runs short is marked skipped, and the check fails):

1. environment: torch / CUDA / GPU, the attention backends importable;
2. correctness: a small model's chunked prefill (chunks 1, 7, 16, 64) against a full prefill, and
   the auto-chosen attention backend against the reference, in the run's dtype;
3. tokens: each configuration (eager, flex, graphs; speed.py) serves greedy requests with a small
   fp32 model; its tokens must equal the reference backend's;
4. iterations: the paper's three batches, a decode / prefill / mixed grid, each configuration
   timed beside the performance model's price for vLLM 0.32 on this GPU (speed.py);
5. serving: Poisson workloads at --qps (6 and 12) under the sarathi and vllm policies, served by
   one configuration (--serve-with, default graphs; eager if that one failed its tokens), beside
   the simulator; each run saved as a run file for `python -m harness validate` (serving.py);
6. sarathi23: the first Sarathi paper's batches on LLaMA-13B's shape (sarathi_batches.py).

Prints one table at the end and writes gpu_check.json, gpu_check.txt (the table), serving.csv and
the run files to --out (default $OUT, else results/gpu_check). Exit 0 when every phase ran and
passed, 1 otherwise; 2 with one line for a bad argument or no CUDA device (without --tiny).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

T0 = time.monotonic()
# Each phase's share of the budget, in seconds of an 8-minute H100 run (compilation included);
# a phase that ends early leaves its time to the later ones (share_deadline).
PHASES = {"correctness": 15.0, "tokens": 50.0, "iterations": 250.0, "serving": 100.0, "sarathi23": 25.0}
POLICIES = ("sarathi", "vllm", "orca", "fastertransformer")


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


# A CUDA device name (upper case) -> the performance model's GPU: the first row whose words are all
# in the name and whose excluded words are not (so H100 PCIe before H100, H200 before H20).
_GPU_NAMES = (
    (("H200",), (), "h200-141g"), (("H100", "PCIE"), (), "h100-80g-pcie"), (("H100",), (), "h100-80g-sxm"),
    (("H20",), (), "h20-96g"), (("B200",), (), "b200-180g"),
    (("RTX PRO 6000", "SERVER"), ("MAX-Q",), "rtx-pro-6000-server-96g"),
    (("RTX PRO 6000",), ("MAX-Q",), "rtx-pro-6000-ws-96g"),  # "... Workstation Edition"
    (("RTX 4090",), (), "rtx-4090-24g"), (("L40S",), (), "l40s-48g"),
    (("A100", "PCIE"), (), "a100-80g-pcie"), (("A100",), (), "a100-80g-sxm"), (("A40",), (), "a40-48g"),
    (("A6000",), (), "rtx-a6000-48g"),
)


def gpu_catalog_key(name: str) -> str | None:
    """The performance model's GPU for a CUDA device name (None: not in the catalog)."""
    n = name.upper()
    return next((gpu for need, avoid, gpu in _GPU_NAMES if all(w in n for w in need) and not any(w in n for w in avoid)),
                None)


def share_deadline(now: float, deadline: float, weights: list[float]) -> float:
    """The deadline of the first of `weights`' parts when the time left is shared in proportion
    to them (a part that ends early leaves its time to the next ones)."""
    left = max(0.0, deadline - now)
    total = sum(weights)
    return now + (left * weights[0] / total if total > 0 else left)


class UsageError(Exception):
    """Bad arguments: one line and exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own usage errors: one line, exit 2 as well
        raise UsageError(message)


def _names(text: str, known, what: str) -> list[str]:
    got = [c.strip() for c in text.split(",") if c.strip()]
    bad = [c for c in got if c not in known]
    if bad or not got:
        raise UsageError(f"{what}: unknown {bad or 'empty'}; choose from {', '.join(known)}")
    return got


def parse_args(argv=None) -> argparse.Namespace:
    from scripts.gpu_check.speed import CONFIGS

    ap = _Parser(prog="gpu_check", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="CPU, tiny model, small shapes: the pipeline without a GPU")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or ROOT / "results" / "gpu_check"))
    ap.add_argument("--model", default=None, help="catalog name (default mistral-7b; tiny-llama with --tiny)")
    ap.add_argument("--gpu", default=None, help="performance-model GPU (default: detected; h100-80g-sxm with --tiny)")
    ap.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated subset of {', '.join(PHASES)}")
    ap.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated subset of {', '.join(CONFIGS)}")
    ap.add_argument("--serve-with", default="graphs", choices=CONFIGS, help="the configuration the serving runs use")
    ap.add_argument("--policies", default="sarathi,vllm")
    ap.add_argument("--qps", default=None, help="rates of the serving phase, comma-separated (default 6,12)")
    ap.add_argument("--requests", type=int, default=None, help="requests a serving run (default 128)")
    for name, default in (("prompt-median", 512), ("prompt-max", 2048), ("output-median", 128), ("output-max", 384)):
        ap.add_argument(f"--{name}", type=int, default=None, help=f"default {default}")
    ap.add_argument("--token-budget", type=int, default=512, help="sarathi token budget (the paper's strict setting)")
    ap.add_argument("--max-num-seqs", type=int, default=128)
    ap.add_argument("--kv-tokens", type=int, default=None, help="KV capacity (default 262,144; 1,024 with --tiny)")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs a shape")
    ap.add_argument("--budget-s", type=float, default=450.0, help="the whole check's time (8 minutes less start-up)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    a.phases = _names(a.phases, PHASES, "--phases")
    a.configs = _names(a.configs, CONFIGS, "--configs")
    a.policies = _names(a.policies, POLICIES, "--policies")
    try:
        a.qps = [float(q) for q in (a.qps or ("40" if a.tiny else "6,12")).split(",")]
    except ValueError:
        raise UsageError(f"--qps: comma-separated numbers, got {a.qps!r}") from None
    if min(a.qps) <= 0 or a.repeats < 1 or a.budget_s <= 0 or (a.requests is not None and a.requests < 1):
        raise UsageError("--qps must be > 0, --repeats and --requests >= 1, --budget-s > 0")
    tiny = a.tiny
    a.model = a.model or ("tiny-llama" if tiny else "mistral-7b")
    a.device, a.dtype = ("cpu", "float32") if tiny else ("cuda", "float16")
    a.attention_backend = "auto"  # the correctness and sarathi23 phases: what the engine picks by itself
    a.requests = a.requests or (8 if tiny else 128)
    a.prompt_median = a.prompt_median or (24 if tiny else 512)
    a.prompt_max = a.prompt_max or (96 if tiny else 2048)
    a.output_median = a.output_median or (6 if tiny else 128)
    a.output_max = a.output_max or (12 if tiny else 384)
    a.kv_tokens = a.kv_tokens or (1024 if tiny else 262144)
    return a


# ---------------------------------------------------------------------------------- phases
def phase_environment(a) -> dict:
    import torch

    from engines.executors.torch.attention import BACKENDS

    env = {"torch": torch.__version__, "device": a.device, "dtype": a.dtype, "cuda": torch.version.cuda,
           "python": sys.version.split()[0]}
    if a.device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env.update(gpu_name=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1))
    dev, dt = torch.device(a.device), getattr(torch, a.dtype)
    env["attention_backends_available"] = [n for n, b in BACKENDS.items() if b.available(dev, dt)]
    import importlib.util

    env["triton"] = importlib.util.find_spec("triton") is not None
    return env


def phase_correctness(a) -> dict:
    """Chunked vs full prefill on the device with the auto-chosen backend, and that backend vs the
    reference, on a small Mistral-like model (sliding window shorter than the prompt)."""
    import torch

    from engines.executors.base import SamplingParams
    from engines.executors.torch.attention import BACKENDS, self_check
    from engines.executors.torch.model_runner import ModelRunner
    from engines.executors.torch.plan import StepItem, StepPlan
    from engines.models import ModelConfig

    cfg = ModelConfig(family="llama", vocab_size=512, hidden_size=256, num_layers=2, num_heads=8, num_kv_heads=2,
                      head_dim=32, intermediate_size=512, sliding_window=48, name="check-mistral-like")
    dev, dt = torch.device(a.device), getattr(torch, a.dtype)
    runner = ModelRunner(cfg, dtype=dt, device=dev, block_size=16, attention_backend=a.attention_backend)
    runner.allocate_kv(64)
    prompt = torch.randint(3, 512, (160,), generator=torch.Generator().manual_seed(1)).tolist()

    def logits(chunk: int, first_block: int, backend) -> torch.Tensor:
        runner.backend = backend
        table = tuple(range(first_block, first_block + 10))
        rows = []
        for s in range(0, len(prompt), chunk):
            item = StepItem(0, tuple(prompt[s:s + chunk]), s, table, False, SamplingParams())
            inputs = runner.prepare(StepPlan(0, (item,)))
            with torch.inference_mode():
                rows.append(runner.model.compute_logits(runner.forward(inputs)).float())
        return torch.cat(rows)

    chosen = runner.backend
    ref = logits(len(prompt), 0, BACKENDS["reference"]())
    out = {"backend": chosen.name, "chunks": {}}
    tol = 1e-3 if dt == torch.float32 else 5e-2
    scale = float(ref.abs().max())
    for chunk in (1, 7, 16, 64, len(prompt)):
        out["chunks"][chunk] = float((logits(chunk, 20, chosen) - ref).abs().max()) / scale
    out["backend_vs_reference_attention"] = self_check(chosen, dev, dt, 8, 2, 128, window=48)
    out["tolerance_relative"] = tol
    out["passed"] = bool(max(out["chunks"].values()) <= tol)
    return out


def serving_config(a, report: dict) -> str:
    """The configuration the serving runs use: --serve-with, or eager when it failed its tokens or
    could not start."""
    config = a.serve_with
    if (report.get("tokens") or {}).get(config, {}).get("same") is False or config in report["errors"]:
        log(f"  serving with eager: {config} failed its tokens or its start")
        config = "eager"
    report["serving_config"] = config
    return config


def release(executor) -> None:
    """Close an executor and give its memory back before another is built."""
    import gc

    import torch

    executor.close()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_phases(a, report: dict, deadline: float) -> None:
    """Each phase in order under its share of the time left; failures are recorded, not raised."""
    from scripts.gpu_check import serving, speed

    todo = [p for p in PHASES if p in a.phases]
    kept = None
    for i, name in enumerate(todo):
        now = time.monotonic()
        if now > deadline - 1:
            report["skipped"].append(name)
            log(f"{name}: skipped (out of budget)")
            continue
        end = share_deadline(now, deadline, [PHASES[p] for p in todo[i:]])
        log(f"{name} (until {end - T0:.0f}s) ...")
        t = now
        try:
            if name == "correctness":
                report["correctness"] = phase_correctness(a)
                log(f"  {report['correctness']}")
            elif name == "tokens":
                report["tokens"] = speed.phase_tokens(a, end, log)
            elif name == "iterations":
                order = [c for c in a.configs if c != a.serve_with] + [c for c in a.configs if c == a.serve_with]
                for j, config in enumerate(order):  # --serve-with last: its executor stays for the serving runs
                    if time.monotonic() > end:
                        report["errors"][config] = "out of budget"
                        continue
                    c_end = share_deadline(time.monotonic(), end, [speed.CONFIG_WEIGHTS[c] for c in order[j:]])
                    try:
                        res, report["startup_s"][config], ex = speed.measure_config(
                            a, config, report["table_shapes"], c_end, log, keep=config == a.serve_with)
                        report["results"][config] = res
                        kept = ex or kept
                    except Exception as e:  # a configuration that cannot start: said, the others still run
                        report["errors"][config] = f"{type(e).__name__}: {e}"
                        log(f"  {config}: FAILED: {report['errors'][config]}")
                        traceback.print_exc()
            elif name == "serving":
                config = serving_config(a, report)
                if kept is not None and config != a.serve_with:  # its memory back before eager's is taken
                    release(kept)
                    kept = None
                ex, kept = kept or speed.build_executor(a, config), None
                report["serving"] = serving.phase_serving(a, ex, serving_perf(a, report["gpu"]), end, log)
                release(ex)
                del ex
            elif name == "sarathi23":
                from scripts.gpu_check.sarathi_batches import run as sarathi_batches

                report["sarathi23_batches"] = sarathi_batches(a, report["gpu"], log)
            report["phase_s"][name] = round(time.monotonic() - t, 1)
        except Exception as e:
            report["errors"][name] = f"{type(e).__name__}: {e}"
            log(f"{name}: FAILED: {e}")
            traceback.print_exc()
        if kept is not None and name == "iterations" and "serving" not in todo:
            release(kept)
            kept = None
        # What is known so far, in case the machine's own time limit ends the check before its table.
        (a.out / "gpu_check.json").write_text(json.dumps(report | {"partial": True}, indent=2, default=str))


def serving_perf(a, gpu: str | None):
    if gpu is None:
        return None
    from engines.perf import Deployment, PerfModel
    from scripts.gpu_check.speed import STACK

    return PerfModel(Deployment.create(model=a.model, gpu=gpu, stack=STACK))


# ---------------------------------------------------------------------------------- the table
def verdict(a, report: dict) -> list[str]:
    """Why the check fails (empty: it passed)."""
    why = [f"{k}: {v}" for k, v in report["errors"].items()]
    why += [f"phase {p} skipped (out of budget)" for p in report["skipped"]]
    c = report.get("correctness")
    if c is not None and not c["passed"]:
        why.append("correctness: chunked prefill differs from the full prefill")
    for config, t in (report.get("tokens") or {}).items():
        if not t.get("same", False):
            why.append(f"tokens {config}: {t}")
    for config, rows in report["results"].items():
        bad = [n for n, r in rows.items() if "error" in r or r.get("skipped", "KV cache too small") != "KV cache too small"]
        why += [f"iterations {config}: {len(bad)} shapes skipped or failed"] if bad else []
    for r in report.get("serving") or []:
        if r["source"] == "torch" and ("skipped" in r or r["completed"] != r["requests"]):
            why.append(f"serving {r['policy']} {r['qps']:g} QPS: {r.get('skipped') or 'unfinished requests'}")
    return why


def render(a, report: dict) -> str:
    from scripts.gpu_check import serving, speed

    env = report.get("environment") or {}
    lines = [f"GPU check: {env.get('gpu_name', a.device)} (model prices: {report['gpu'] or 'none'}), torch "
             f"{env.get('torch')}, {a.model} {a.dtype}, {time.monotonic() - T0:.0f} s"]
    c = report.get("correctness")
    if c:
        worst = max(c["chunks"].values())
        lines.append(f"correctness ({c['backend']}): chunked vs full prefill {worst:.1e} relative (tolerance "
                     f"{c['tolerance_relative']:g}), attention vs reference {c['backend_vs_reference_attention']:.1e}: "
                     f"{'PASS' if c['passed'] else 'FAIL'}")
    for config, t in (report.get("tokens") or {}).items():
        said = ("same as the reference" if t["same"] else "DIFFERENT from the reference") if "same" in t else \
            f"not checked ({t.get('error') or t.get('skipped')})"
        lines.append(f"greedy tokens {config}: {said}; steps ran {', '.join(t.get('paths', [])) or '-'}")
    if report["results"]:
        lines += ["", speed.render(report["table_shapes"], report["results"], report["prices_s"], a.configs, report["gpu"])]
        lines.append("start-up s (weights, self-check, compilation, capture): " +
                     ", ".join(f"{k} {v:.0f}" for k, v in report["startup_s"].items()))
        lines += speed.targets(report["results"], report["prices_s"], a.tiny)
    if report.get("serving"):
        lines += ["", serving.render(report["serving"], report.get("serving_config", "?"))]
    s = report.get("sarathi23_batches")
    if s and "measured" in s:
        got = [f"{k} {v:.2f}" for k, v in (("measured", s["measured"]["decode_speedup"]),
                                            ("model", (s.get("predicted") or {}).get("decode_speedup"))) if v]
        lines.append(f"\nsarathi23 batches ({s['model']}): decode speedup {', '.join(got) or 'not positive'}")
    why = verdict(a, report)
    lines += ["", "PASSED" if not why else "FAILED: " + "; ".join(why)]
    return "\n".join(lines)


def main(argv=None) -> int:
    global T0
    T0 = time.monotonic()  # the budget counts from here (a test may load the module long before)
    try:
        a = parse_args(argv)
    except UsageError as e:
        print(f"gpu_check: {e}", file=sys.stderr)
        return 2
    import torch

    if not a.tiny and not torch.cuda.is_available():
        print("gpu_check: needs a CUDA device (none found); --tiny runs the pipeline on CPU", file=sys.stderr)
        return 2
    if a.tiny:
        torch.set_num_threads(1)  # small shared CPUs: OpenMP spinning costs more than it gives
    from scripts.gpu_check import speed

    a.out.mkdir(parents=True, exist_ok=True)
    deadline = T0 + a.budget_s
    report: dict = {"args": {k: str(v) for k, v in vars(a).items()}, "errors": {}, "skipped": [], "phase_s": {},
                    "results": {}, "startup_s": {}, "stack": speed.STACK}
    report["environment"] = phase_environment(a)
    log(f"environment: {report['environment']}")
    report["gpu"] = a.gpu or ("h100-80g-sxm" if a.tiny else gpu_catalog_key(report["environment"]["gpu_name"]))
    report["table_shapes"] = speed.shapes(a.tiny)
    price = speed.price_fn(a.model, report["gpu"])
    report["prices_s"] = {name: price(items) for name, items in report["table_shapes"]} if price else {}
    run_phases(a, report, deadline)
    text = render(a, report)
    print("\n" + text + "\n", flush=True)
    (a.out / "gpu_check.txt").write_text(text + "\n")
    if report.get("serving"):
        import csv

        rows = [r for r in report["serving"] if "skipped" not in r]
        with (a.out / "serving.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=sorted({k for r in rows for k in r}))
            w.writeheader()
            w.writerows(rows)
    report.update(passed=not verdict(a, report), total_s=round(time.monotonic() - T0, 1))
    (a.out / "gpu_check.json").write_text(json.dumps(report, indent=2, default=str))
    log(f"{'PASSED' if report['passed'] else 'FAILED'}; report in {a.out / 'gpu_check.json'}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
