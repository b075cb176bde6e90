"""`python -m harness calibrate RUN [--window F] [--factors a,b] [--out FILE] [key=value ...]`: fit the
calibration factors (engines/perf/calibration.py) on a --window share of the run's requests (spread
over the run, the whole stream replayed), report the error on the others, write the calibration file that
run, plan and validate take as perf.calibration=FILE. Bad input is one line, exit 2, nothing written."""
from __future__ import annotations

import json
from pathlib import Path

from common.errors import HarnessError
from engines.perf.calibration import FACTORS, describe_factors
from harness.validate.args import check_out, parse
from harness.validate.compare import table
from harness.validate.fit import calibrate
from harness.config import config_for, experiment_config
from harness.validate.replay import target_for
from harness.validate.runfile import read_run

USAGE = __doc__.split(":", 1)[0] + "\n\nFactors: " + "; ".join(f"{k}: {v[0]} [{v[1]:g}, {v[2]:g}]" for k, v in FACTORS.items()) + """
Example:
  python -m harness calibrate run_qps6.jsonl model=mistral-7b hardware=h200 scheduler=sarathi \\
      scheduler.sarathi.token_budget=512 max_model_len=4096 --out h200_torch.json
  python -m harness validate run_qps12.jsonl ... perf.calibration=h200_torch.json
"""


def calibrate_command(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(USAGE)
        return 0
    words = parse(argv, "calibrate", ("--out", "--probe", "--kv-tokens", "--window", "--factors"))
    check_out("calibrate", words.flags["--out"], directory=False)
    if any(o.startswith("perf.calibration=") for o in words.overrides):
        raise HarnessError("calibrate fits from the model's own numbers: drop perf.calibration=")
    factors = tuple(f.strip() for f in words.flags["--factors"].split(",") if f.strip())
    bad = [f for f in factors if f not in FACTORS]
    if bad or not factors:
        raise HarnessError(f"--factors: unknown {', '.join(bad) or '(none given)'}; known: {', '.join(FACTORS)}")
    window = words.flags["--window"]
    if not 0 < window < 1:
        raise HarnessError(f"--window must be in (0, 1), got {window}")
    run = read_run(words.run, words.probe)
    cfg = config_for(run, words.overrides)
    target = target_for(run, experiment_config(cfg), words.flags["--kv-tokens"])
    if target.plan.calibration is not None:  # a saved run's config may carry one
        raise HarnessError("calibrate fits from the model's own numbers: this run's config has perf.calibration; "
                           "add perf.calibration=null")
    out = Path(words.flags["--out"] or Path(target.config.results_dir) / "calibrations"
               / f"{Path(words.run).stem}.json")
    print(f"calibrate {run.describe()}")
    print(f"simulated on {target.describe()}")
    try:
        fit = calibrate(run, target, window, factors)
    except ValueError as e:
        raise HarnessError(f"calibrate: {e}") from None
    cal = fit.calibration
    print(f"fitted on {cal.fitted_on} ({fit.evaluations} simulations)")
    print(table(fit.before_held_out, "Held out, uncalibrated"))
    print(table(fit.held_out, "Held out, calibrated"))
    for w in fit.warnings:
        print(f"WARNING: {w}")
    print(f"factors: {describe_factors(cal.factors)}")
    print(f"error on the fitted part {100 * cal.fit_error:.1f}%, on the held-out part {100 * cal.held_out_error:.1f}% "
          f"(the band a prediction with this calibration carries)")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(cal.to_json(), indent=2) + "\n")
    print(f"calibration: {out} (use it: perf.calibration={out})")
    return 0
