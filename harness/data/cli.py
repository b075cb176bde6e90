"""`python -m harness data COMMAND KEY=VALUE ...` (also `python -m harness.data ...`)

  stats  dataset=NAME [dataset.KEY=VALUE ...] [n=100000] [seed=0]
         median/P90/std/mean of prompt, output and P:D ratio, next to the card's published
         numbers. A trace file is summarised whole (after the filter); an embedded default by n
         seeded draws.
  sample dataset=NAME n=2048 seed=0 out=FILE [dataset.KEY=VALUE ...]
         the exact lengths a run with that seed would use, as a trace CSV
         (num_prefill_tokens,num_decode_tokens), with a provenance sidecar FILE.provenance.yaml.
  build  dataset=NAME tokenizer=PATH [source=FILE_OR_HUB_ID] [split=train] [limit=N] [out=FILE]
         tokenize the dataset's source text (needs `datasets`, and `tokenizers` or
         `transformers`), filter by dataset.max_total_tokens, write a trace CSV + provenance.
         Default out: data/traces/NAME.csv (ignored by git: traces are not committed).

Errors print as one line and exit with status 2.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from common.errors import HarnessError
from harness.overrides import exits_2, split
from harness.paths import ROOT
from harness.workload import load_workload
from harness.workload.trace_file import read_trace

from .build import build_trace
from .config import CARD_DIR, int_arg, load_dataset_config
from .stats import format_stats, length_stats


def cmd_stats(args: dict[str, str]) -> int:
    ds = load_dataset_config(args)
    seed = int_arg(args, "seed", 0)
    if ds.get("trace_file"):
        rows = read_trace(ds["trace_file"], ds.get("max_total_tokens"))
        n = rows.prompt_lens.size
        ds = {**ds, "sampling": "sequential"}
    else:
        n = int_arg(args, "n", 100_000, minimum=1)
    w = load_workload(ds, n, seed)
    card = CARD_DIR / f"{ds.get('name')}.yaml"  # the dataset card: its published numbers beside ours
    published = (yaml.safe_load(card.read_text()) or {}).get("published") if card.is_file() else None
    print(f"# {w.source}")
    print(format_stats(length_stats(w), published))
    return 0


def cmd_sample(args: dict[str, str]) -> int:
    ds = load_dataset_config(args)
    if "out" not in args:
        raise HarnessError("sample needs out=FILE")
    n, seed = int_arg(args, "n", 2048, minimum=1), int_arg(args, "seed", 0)
    w = load_workload(ds, n, seed)
    out = Path(args["out"])
    out.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"num_prefill_tokens": w.prompt_lens, "num_decode_tokens": w.output_lens}).to_csv(out, index=False)
    prov = {"dataset": ds, "n": n, "seed": seed, "source": w.source, "written_by": "python -m harness.data sample"}
    out.with_name(out.name + ".provenance.yaml").write_text(yaml.safe_dump(prov, sort_keys=False))
    print(f"wrote {n} requests to {out} (median prompt {np.median(w.prompt_lens):g}, output {np.median(w.output_lens):g})")
    return 0


def cmd_build(args: dict[str, str]) -> int:
    ds = load_dataset_config(args)
    if not args.get("tokenizer"):
        raise HarnessError("build needs tokenizer=PATH (a tokenizer.json, a folder holding one, or a transformers name)")
    out = Path(args.get("out") or ROOT / "data" / "traces" / f"{ds.get('name')}.csv")
    limit = int_arg(args, "limit", 0, minimum=1) if "limit" in args else None
    prov = build_trace(ds, args["tokenizer"], out, source=args.get("source"), split=args.get("split"), limit=limit)
    print(f"wrote {prov['rows_written']} requests to {out} ({prov['dropped_over_max_total_tokens']} over "
          f"max_total_tokens, {prov['dropped_empty']} empty dropped); provenance in {out.name}.provenance.yaml")
    return 0


COMMANDS = {"stats": cmd_stats, "sample": cmd_sample, "build": cmd_build}


@exits_2
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or any(a in ("-h", "--help", "help") for a in argv):
        print(__doc__)
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        raise HarnessError(f"unknown command {argv[0]!r} (commands: {', '.join(COMMANDS)})")
    return COMMANDS[argv[0]](split(argv[1:]))
