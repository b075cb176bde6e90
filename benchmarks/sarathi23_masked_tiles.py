"""The first Sarathi paper's claims with another attention kernel than `perf.stack=sarathi-2023`'s own.

The stack prices the paper's xFormers attention from the paper's operator table (`xformers-2023`,
engines/perf/kernels.py). This swaps that one kernel for a what-if (--kernel): `sarathi-2024-causal`
(the default: the earlier stand-in, Sarathi-Serve's measured wrapper, with masked tiles skipped),
`sarathi-2024` (the stand-in as it was, masked tiles paid), `xformers-2023-percall` (the table's
kernel with a per-call cost the table cannot rule out) or `xformers-2023-decodecall` (its decode input
split into the largest per-call cost the bandwidth allows). It re-runs the chosen cells of the study with
it into --runs, prices the model claims with it, and prints every claim beside the reference's value.
Claims whose cells were not re-run say so. A what-if, not a fit: no constant moves.

    python benchmarks/sarathi23_masked_tiles.py                 # the gain and Orca cells (7 runs, ~1 min)
    python benchmarks/sarathi23_masked_tiles.py --pipeline      # + the four pipeline cells (~4 min more)
    python benchmarks/sarathi23_masked_tiles.py --kernel xformers-2023-percall
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from omegaconf import OmegaConf  # noqa: E402

from harness.analysis.sarathi23.claims import claim_table, load_claims, within_count  # noqa: E402
from harness.analysis.sarathi23.matrix import PIPELINE, REPLICAS, sarathi23_cells  # noqa: E402
from harness.analysis.sarathi23.runs import study_runs  # noqa: E402
from harness.config import compose  # noqa: E402

WHAT_IF = "sarathi-2024-causal"  # the default what-if


def chosen_cells(pipeline: bool):
    keep = ("sarathi23_gain_", "sarathi23_orca_") + ((PIPELINE, REPLICAS) if pipeline else ())
    return [c for c in sarathi23_cells() if c.name.startswith(keep)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=None, help="where the what-if runs go (default: a temporary directory)")
    ap.add_argument("--pipeline", action="store_true", help="re-run the four GPT-3 pipeline cells too")
    ap.add_argument("--kernel", default=WHAT_IF, help="the what-if attention kernel (engines/perf/kernels.py)")
    args = ap.parse_args()
    runs_dir = Path(args.runs or tempfile.mkdtemp(prefix="sarathi23_masked_tiles_"))
    cells, what_if = chosen_cells(args.pipeline), {}
    for cell in cells:
        words = [*cell.overrides, f"perf.attention_kernel={args.kernel}", f"results_dir={runs_dir}", "progress=false"]
        done = subprocess.run([sys.executable, "-m", "harness", *words], cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:  # a broken run is never reported as a number
            print(f"{cell.name}: the run failed (exit {done.returncode})\n{done.stderr[-2000:]}", file=sys.stderr)
            return 3
        what_if[cell.name] = OmegaConf.to_container(compose(list(words[:-2])), resolve=True)
    claims = load_claims()
    reference = claim_table(claims, study_runs(ROOT / "results" / "reference").runs)
    ours = claim_table(claims, study_runs(runs_dir, cells=what_if).runs, attention=args.kernel)
    print(f"what-if runs: {runs_dir}\n")
    print(f"{'claim':32s} {'published':>9s} {'reference':>10s} {args.kernel:>25s}")
    for ref, new in zip(reference.itertuples(), ours.itertuples()):
        now = (new.role if new.role != "check" else "not re-run" if new.within is None
               else f"{new.reproduced:.4g} ({'within' if new.within else 'outside'})")
        was = f"{ref.reproduced:.4g}" + ("" if ref.within is None or ref.within else " *")
        print(f"{ref.id:32s} {ref.published:9.4g} {was:>10s} {now:>25s}")
    print("\n* outside with the stack's own kernel.  within: reference %d of %d; what-if %d of the %d re-priced"
          % (*within_count(reference), *within_count(ours)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
