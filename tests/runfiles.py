"""Synthetic run files for `validate`/`calibrate` tests: evenly spaced requests whose tokens come
at a fixed pace (harness/validate/runfile.py reads them)."""
from __future__ import annotations

import json
from pathlib import Path


def write_run_file(path: Path, n: int, gap_s: float, prompt_tokens: int, output_tokens: int,
                   ttft_s: float, tpot_s: float) -> Path:
    """`n` requests arriving `gap_s` apart, each `prompt_tokens` long, its first token `ttft_s` after
    arrival and one more every `tpot_s`, to `output_tokens`."""
    rows = []
    for i in range(n):
        arrival = gap_s * i
        times = [round(arrival + ttft_s + tpot_s * k, 6) for k in range(output_tokens)]
        rows.append({"request_id": i, "prompt_tokens": prompt_tokens, "output_tokens": output_tokens,
                     "arrival_s": round(arrival, 6), "first_token_s": times[0], "last_token_s": times[-1],
                     "token_times_s": times})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
