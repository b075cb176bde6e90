"""The first Sarathi paper's three basic batches (Agrawal et al., arXiv 2308.16369, Sec. 3: a
prefill-only batch of 1,024 tokens, a decode-only batch of 4 at 1,024 tokens of context, and a
decode-maximal batch of 1,021 prefill tokens + 3 decodes, one tile-aligned 1,024-token batch),
measured with the torch executor on this GPU beside the performance model's prediction for it.
A prefill of 1,021 tokens alone is measured too: the hybrid batch less it is the cost of the three
decodes that ride along, whose per-token ratio to the decode-only batch's is the decode speedup.

Random weights of LLaMA-13B's shape (the paper's), or the largest catalog shape whose weights fit
this device; `--tiny` (CPU): the tiny model at a 64-token scale. Called by check.py's phase
"sarathi23 batches"; `derived` is plain arithmetic (tests/test_gpu_check_sarathi23.py).
"""
from __future__ import annotations

MODELS = ("llama-13b", "llama2-7b", "mistral-7b")  # the paper's shape first, then smaller ones
FIT_SHARE = 0.8  # of the device memory the weights may take (KV and activations need the rest)


def shapes(context: int = 1024) -> list[tuple[str, list[tuple[int, int]]]]:
    """(name, [(context_len, new_tokens), ...]) of the batches, scaled to `context` tokens."""
    return [
        (f"prefill {context}", [(0, context)]),
        (f"decode 4 x ctx {context}", [(context, 1)] * 4),
        (f"prefill {context - 3} + 3 decodes", [(0, context - 3)] + [(context, 1)] * 3),
        (f"prefill {context - 3} (alone)", [(0, context - 3)]),
    ]


def derived(t: list[float]) -> dict[str, float | None]:
    """From the four times of `shapes` (seconds, in order): the decode-only batch's time a token,
    the marginal time a riding decode (hybrid less the prefill alone, over 3), their ratio (the
    decode speedup; None when the marginal is not positive, i.e. below the timing noise), and the
    hybrid batch over the 1,024-token prefill."""
    prefill, decode4, hybrid, alone = t
    per_token = decode4 / 4
    marginal = (hybrid - alone) / 3
    return {"decode_s_per_token": per_token, "riding_decode_s": marginal,
            "decode_speedup": per_token / marginal if marginal > 0 else None, "hybrid_over_prefill": hybrid / prefill}


def pick_model(device_bytes: int, candidates=MODELS) -> str | None:
    """The first catalog shape whose fp16 weights fit FIT_SHARE of the device."""
    from engines.perf import get_model

    return next((m for m in candidates if get_model(m).weight_bytes <= FIT_SHARE * device_bytes), None)


def run(a, gpu: str | None, log) -> dict:
    """Measure the batches (check.py's args `a`: device, dtype, tiny, attention_backend, seed)."""
    import torch

    from engines.executors.torch import TorchExecutor
    from harness.profile.iteration import IterationBench
    from harness.profile.ops import measure

    context = 64 if a.tiny else 1024
    if a.tiny:
        model = "tiny-llama"
    else:
        model = pick_model(torch.cuda.get_device_properties(0).total_memory)
        if model is None:
            return {"skipped": "no catalog model of the paper's size fits this device"}
    executor = TorchExecutor.from_config(model=model, dtype=a.dtype, device=a.device, block_size=16,
                                         kv_capacity_tokens=16 * context, attention_backend=a.attention_backend, seed=a.seed)
    perf = None
    if gpu is not None and not a.tiny:
        from engines.perf import Deployment, PerfModel

        perf = PerfModel(Deployment.create(model=model, gpu=gpu))
    bench = IterationBench(executor)
    rows, measured = [], []
    try:
        for name, items in shapes(context):
            med, best = measure(bench.batch(items), torch.device(a.device), warmup=2, repeats=7)
            row = {"batch": name, "measured_s": med, "measured_min_s": best}
            if perf is not None:
                row["predicted_s"] = perf.iteration_time([n for _, n in items], [c for c, _ in items])
            rows.append(row)
            measured.append(med)
            log(f"  {name:<28} measured {med * 1e3:8.2f} ms" +
                (f"   predicted ({gpu}) {row['predicted_s'] * 1e3:8.2f} ms" if "predicted_s" in row else ""))
    finally:
        bench.release()
        executor.close()
    out = {"model": model, "context": context, "batches": rows, "measured": derived(measured)}
    if perf is not None:
        out["predicted"] = derived([r["predicted_s"] for r in rows])
    log(f"  decode speedup measured {out['measured']['decode_speedup']}, predicted "
        f"{(out.get('predicted') or {}).get('decode_speedup')}")
    return out
