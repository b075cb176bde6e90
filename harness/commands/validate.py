"""`python -m harness validate RUN [--max-error X] [--out DIR] [--probe S@Q] [--kv-tokens N] [key=value ...]`:
the measured run replayed in the simulator on the deployment the overrides name; sim vs real for
TTFT, TPOT, ITL (where the run kept each token's time) and E2E at mean/P50/P90/P99 with the signed
error, a figure, a summary. Exit 1 when the largest headline error is over --max-error; bad input
(a run file's bad row, an unknown key) is one line and exit 2, with nothing written."""
from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

from omegaconf import OmegaConf

from harness.validate.args import check_out, parse
from harness.validate.bands import calibration_entry
from harness.validate.compare import HEADLINE, compare, table
from harness.validate.figure import write_figure
from harness.config import config_for, experiment_config
from harness.validate.replay import kv_bound, replay, target_for
from harness.validate.runfile import read_run

USAGE = __doc__.split(":", 1)[0] + """

RUN: a harness run directory (live or endpoint), vllm bench serve --save-result --save-detailed JSON,
or a .jsonl/.csv with one request a line (docs/validate.md). Judged (--max-error): mean, P50 and P90 of
TTFT, TPOT and E2E. A calibration from python -m harness calibrate: perf.calibration=FILE.
Example:
  python -m harness validate run.jsonl model=mistral-7b hardware=h200 scheduler=sarathi \\
      scheduler.sarathi.token_budget=512 max_model_len=4096 --max-error 0.25
"""


def validate_command(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(USAGE)
        return 0
    words = parse(argv, "validate", ("--max-error", "--out", "--probe", "--kv-tokens"))
    check_out("validate", words.flags["--out"], directory=True)
    run = read_run(words.run, words.probe)
    cfg = config_for(run, words.overrides)
    target = target_for(run, experiment_config(cfg), words.flags["--kv-tokens"])
    print(f"validate {run.describe()}")
    print(f"simulated on {target.describe()}")
    sim = replay(target, run.records)
    bound = kv_bound(target, sim, words.flags["--kv-tokens"] is not None)
    if bound:
        print(bound, file=sys.stderr)
    result = compare(run.records, sim, run.dropped, run.per_token)
    text = table(result)
    print(text)
    cal = target.plan.calibration
    if cal is not None:
        print(f"{cal.describe()}: the held-out error it was fitted with, against this run's below")
    out = Path(words.flags["--out"] or Path(target.config.results_dir) / "validate"
               / f"{Path(words.run).stem}-{datetime.now().strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    summary = {
        "run": str(run.path), "format": run.kind, "deployment": target.describe(),
        "calibration": calibration_entry(cal),
        "kv_bound": bound is not None, "compared": result.compared, "dropped_from_run": result.dropped_real, "unfinished_in_sim": result.dropped_sim,
        "headline": list(HEADLINE), "largest_headline_error": result.headline_error(),
        "rows": [{"metric": r.metric, "stat": r.stat, "real_s": r.real, "sim_s": r.sim, "error": r.error} for r in result.rows],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "table.md").write_text(text + "\n")
    (out / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    write_figure(out / "validate.png", [run.records[i] for i, s in enumerate(sim) if s.error is None], 
                 [s for s in sim if s.error is None], f"{run.path.name}: {target.describe()}")
    print(f"validate: {out}")
    limit = words.flags["--max-error"]
    if limit is not None and not result.headline_error() <= limit:
        print(f"validate: largest headline error {100 * result.headline_error():.1f}% is over --max-error "
              f"{100 * limit:.1f}%")
        return 1
    return 0
