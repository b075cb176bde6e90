"""Derive data/lengths/sharegpt_conversations.yaml from the ShareGPT trace (run by hand).

    python scripts/derive_conversation_fit.py --trace ../shared/traces/sharegpt_8k_filtered_stats_llama2_tokenizer.csv

The trace has one row per conversation round; conversations are rebuilt with the chain rule of
harness/workload/conversation_trace.py (a round continues the previous row when its prompt is at
least the previous prompt + answer). Written: the pmf of turns per conversation, and 101-level
quantile tables of the first user message, each later user message (prompt growth beyond the
previous prompt and answer) and each answer. Marginals only: turn lengths are drawn
independently (an approximation; `sessions.lengths: trace` replays the real conversations).
The trace itself is never copied into the repository; only these statistics are.
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "data" / "lengths" / "sharegpt_conversations.yaml"
LEVELS = np.linspace(0, 100, 101)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, required=True)
    args = ap.parse_args()
    df = pd.read_csv(args.trace)
    p = df["num_prefill_tokens"].to_numpy(np.int64)
    o = df["num_decode_tokens"].to_numpy(np.int64)
    start = np.r_[True, p[1:] < p[:-1] + o[:-1]]
    conv = np.cumsum(start) - 1
    turns = np.bincount(conv)
    users = (p[1:] - p[:-1] - o[:-1])[~start[1:]]
    pmf = np.bincount(turns)[1:] / turns.size
    table = lambda x: [int(round(v)) for v in np.percentile(x, LEVELS)]  # noqa: E731
    out = {
        "name": "sharegpt_conversations",
        "derived_on": dt.date.today().isoformat(),
        "derived_by": "scripts/derive_conversation_fit.py",
        "trace": {"file": args.trace.name, "sha256": hashlib.sha256(args.trace.read_bytes()).hexdigest(),
                  "rows": int(p.size), "conversations": int(turns.size)},
        "measured": {"turns_mean": round(float(turns.mean()), 3), "first_user_median": float(np.median(p[start])),
                     "user_median": float(np.median(users)), "output_median": float(np.median(o)),
                     "prior_context_token_share": round(float((p[~start] - users).sum() / p.sum()), 4)},
        "turns": {"pmf": [round(float(x), 6) for x in pmf]},
        "first_user_tokens": {"quantiles": table(p[start])},
        "user_tokens": {"quantiles": table(users)},
        "output_tokens": {"quantiles": table(o)},
    }
    header = ("# Turn lengths of the ShareGPT conversations (openchat_sharegpt4 trace, rounds rebuilt into\n"
              "# conversations); the embedded default of dataset=sharegpt_conversations. Card:\n"
              "# data/cards/sharegpt_conversations.yaml. Regenerate with the command in the script.\n")
    OUT.write_text(header + yaml.safe_dump(out, sort_keys=False, width=120))
    print(f"wrote {OUT.relative_to(REPO)}: {turns.size} conversations, turns mean {turns.mean():.2f}")


if __name__ == "__main__":
    main()
