"""Length statistics in the paper's Table 2 form: median, P90, std of prompt, output and P:D."""
from __future__ import annotations

import numpy as np

from harness.workload import Workload


def length_stats(w: Workload) -> dict[str, dict[str, float]]:
    p = w.prompt_lens.astype(np.float64)
    o = w.output_lens.astype(np.float64)
    out = {key: {"median": float(np.median(a)), "p90": float(np.percentile(a, 90)), "std": float(a.std()),
                 "mean": float(a.mean())} for key, a in (("prompt", p), ("output", o), ("pd_ratio", p / o))}
    return out | {"count": {"requests": float(len(w))}}


def format_stats(stats: dict, published: dict | None) -> str:
    lines = [f"{'':10s}{'median':>10s}{'p90':>10s}{'std':>10s}{'mean':>10s}   published median/p90"]
    for key in ("prompt", "output", "pd_ratio"):
        s = stats[key]
        pub = (published or {}).get(key)
        pub_txt = f"   {pub['median']:g}/{pub['p90']:g}" if pub else ""
        lines.append(f"{key:10s}{s['median']:10.1f}{s['p90']:10.1f}{s['std']:10.1f}{s['mean']:10.1f}{pub_txt}")
    lines.append(f"requests  {int(stats['count']['requests'])}")
    return "\n".join(lines)
