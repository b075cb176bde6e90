#!/usr/bin/env python3
"""Operator-level fidelity of engines.perf's analytical model against Vidur's measured profiles.

For every measured point in ../shared/profiles/vidur (medians, ms; --profiles DIR) this prices the same
operator and shape with the project's analytical model and reports MAPE per
operator family x GPU x TP (or x interconnect configuration for collectives).

Reading the profiles into points: harness/analysis/perf_model/vidur_points.py; how each point is priced
(GEMMs, elementwise pieces, embedding, prefill/decode attention, all-reduce, send/recv):
harness/analysis/perf_model/operator_fidelity.py, the same code that prices the committed sample for the
report's operator-fidelity figure (figures/perf/perf_operator_fidelity.png).

Usage:  python benchmarks/validate_operators.py [--a100 pcie|sxm] [--profiles DIR] [--out DIR]
        python benchmarks/validate_operators.py --write-sample data/perf/vidur_operator_sample.csv

First pass of issue 14 (operator validation suite); it prices with the model as it is and fits
nothing. A helper wrote it; its findings are in the closing note of that issue.
Writes DIR/points.csv (every point) and DIR/mape.csv (the table); prints the table.
--write-sample PATH writes the stratified sample of the measured points (no predictions) instead.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engines.perf.kernels import DEFAULT_STACK, known_stacks  # noqa: E402
from harness.analysis.perf_model.operator_fidelity import ordered, price, summarize  # noqa: E402
from harness.analysis.perf_model.vidur_points import (  # noqa: E402
    VIDUR_DIR, load_sample, measured_points, stratified_sample, write_sample)


def print_tables(pts: pd.DataFrame) -> None:
    """The tables of one stack's priced points."""
    table = summarize(pts, ["family", "gpu", "tp"])
    print(f"A100 compute profile priced as: {pts.loc[pts.gpu == 'a100', 'catalog_gpu'].iloc[0]}")
    print("(network rows: gpu = Vidur network dir, tp = num_workers; per devices_per_node see below)\n")
    print(table.to_string(index=False, float_format=lambda x: f"{x:.1f}"))
    net = summarize(pts[pts.family.isin(["all_reduce", "send_recv"])],
                    ["family", "gpu", "num_workers", "devices_per_node", "link"])
    print("\nCollectives by configuration (all sizes):")
    print(net.to_string(index=False, float_format=lambda x: f"{x:.1f}"))
    coll = pts[pts.family.isin(["all_reduce", "send_recv"]) & (pts.size_bytes <= 64 * 2**20)]
    net64 = summarize(coll, ["family", "gpu", "num_workers", "devices_per_node", "link"])
    print("\nCollectives by configuration, sizes <= 64 MiB (the serving range: tokens x hidden x 2 B):")
    print(net64.to_string(index=False, float_format=lambda x: f"{x:.1f}"))
    fam = summarize(pts, ["family", "gpu"])
    print("\nPer family x GPU (all TP pooled):")
    print(fam.to_string(index=False, float_format=lambda x: f"{x:.1f}"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a100", choices=("pcie", "sxm"), default="pcie",
                    help="catalog card for Vidur's 'a100' compute profile (default pcie; docs/performance-model/validation.md says why)")
    ap.add_argument("--out", default="validation", help="where points.csv and mape.csv go")
    ap.add_argument("--profiles", default=None, help="Vidur's data/profiling layout (compute/, network/)")
    ap.add_argument("--compare-a100", action="store_true",
                    help="also print the A100 compute families' MAPE under both catalog cards")
    ap.add_argument("--stack", default=DEFAULT_STACK, choices=known_stacks(),
                    help="the engine stack whose kernels price the points (engines/perf/kernels.py)")
    ap.add_argument("--write-sample", metavar="PATH", default=None,
                    help="write the stratified sample of the measured points (shapes + medians, no "
                         "predictions; data/perf/vidur_operator_sample.csv) and exit")
    args = ap.parse_args()
    vidur = Path(args.profiles) if args.profiles else VIDUR_DIR
    if not (vidur / "compute").is_dir():
        sys.exit(f"no Vidur profiles at {vidur} (--profiles DIR)")
    measured = measured_points(vidur)
    if args.write_sample:
        path = write_sample(stratified_sample(measured), args.write_sample, total=len(measured))
        print(f"wrote {path} ({len(load_sample(path))} of {len(measured)} points, {path.stat().st_size:,} bytes)")
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pts = ordered(price(measured, args.stack, args.a100))
    pts.to_csv(out / "points.csv", index=False, float_format="%.6g")
    summarize(pts, ["family", "gpu", "tp"]).to_csv(out / "mape.csv", index=False, float_format="%.2f")
    pd.set_option("display.width", 200)
    pd.set_option("display.max_rows", 500)
    pd.set_option("display.max_colwidth", 60)
    print_tables(pts)
    if args.compare_a100:
        other = ordered(price(measured, args.stack, "sxm" if args.a100 == "pcie" else "pcie"))
        a = summarize(pts[pts.gpu == "a100"], ["family"]).set_index("family")["mape_pct"]
        b = summarize(other[other.gpu == "a100"], ["family"]).set_index("family")["mape_pct"]
        print(f"\nA100 compute MAPE %: {args.a100} vs other card")
        print(pd.DataFrame({args.a100: a, "other": b}).round(1).to_string())
    by_stack = {stack: summarize(ordered(price(measured, stack, args.a100)), ["family", "gpu"])
                .set_index(["family", "gpu"])["mape_pct"] for stack in known_stacks()}
    print("\nMAPE % per family x GPU, by engine stack (perf.stack=):")
    print(pd.DataFrame(by_stack).round(1).to_string())
    print(f"\nwrote {out / 'points.csv'} ({len(pts)} points) and {out / 'mape.csv'}")


if __name__ == "__main__":
    main()
