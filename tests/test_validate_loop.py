"""The loop on a real engine: the in-repo server's torch executor (real forward passes of a tiny
Llama on this machine's CPU) measured at one rate, `calibrate` on it, `validate` the prediction at a
second rate and a second batch limit against a second measured run; and the run formats
`validate` reads, each built from that real run, with their refusals.

Tolerance: the calibrated simulator must predict the second run's median TPOT and median E2E
within a factor of 2 (sim/real in [1/2, 2], FACTOR), and closer than the uncalibrated model does
(which is off by 5-10x here). Why so loose: the engine shares two cores with the client and with
whatever else the host runs; on this machine the same configuration measured minutes apart moved
its median TPOT by 2x under a neighbour's load (1.5-2x was seen between the fitted window and the
second run). What the test asserts is that the loop closes on a run it was not fitted on, not the
host's speed. The deliberate mistake (test_a_wrong_factor_fails: the calibrated factors each off
by 5x in the slow direction, every iteration five times the fitted one) then fails it for certain:
a prediction within 2x, made 5x slower, is over 2.5x.

The premise, measured: the host kept its speed between the two runs. Under heavy load (7-19 on two
cores) it once did not, and calibrated errors of +205 %/+461 % (and -66 % another time) said nothing
about the calibration. So for each measured run the test reads how long the engine's threads waited
for a CPU beside how long they ran (/proc/PID/task/*/schedstat), and times a fixed small torch
workload right before and right after it; when either moved more than STEADY between the two runs,
the judging tests skip, naming the measured ratios (visible with -rs), and assert as before otherwise.
(The torch probe alone missed it twice at load 8: ratios 1.10x and 1.24x, calibrated errors +93-144 %.)
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="the torch executor needs torch (pip install '.[engine]')")

from engines.perf.calibration import FACTORS  # noqa: E402
from engines.schedulers import SchedulerConfig  # noqa: E402
from engines.server.config import ServerConfig  # noqa: E402
from harness.backends.live import LiveServerSpec, run_live_result, serve  # noqa: E402
from harness.loadgen import LoadOptions  # noqa: E402
from harness.records import RequestSpec  # noqa: E402
from harness.validate.runfile import read_run, write_jsonl  # noqa: E402

from tests.cli import ROOT  # noqa: E402

FACTOR = 2.0
JUDGED = ("tpot.p50", "e2e.p50")
# Device numbers given, not probed: the uncalibrated baseline must not move with the probe's luck.
# (The calibration records the device it scaled, so a probed device would be pinned anyway.)
DEPLOYMENT = ["model.name=tiny-llama", "hardware=cpu", "hardware.cpu_flops=1e11", "hardware.cpu_bandwidth=2e10",
              "perf.stack=ideal", "scheduler=sarathi", "scheduler.sarathi.token_budget=256", "max_model_len=512",
              "--kv-tokens", "16384"]
# The host's speed (the probe's time) may move this much between the two runs and a calibration still
# be judged: what it leaves of FACTOR (2 / 1.5 = 1.33x) is the model's own share.
STEADY = 1.5
FIRST, SECOND = (16, 4.0, 1), (4, 6.0, 2)  # (max_num_seqs, QPS, seed): the second batch limit and rate


def _poisson(n: int, qps: float, seed: int) -> list[RequestSpec]:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / qps, n))
    return [RequestSpec(i, float(t[i]), int(rng.integers(32, 384)), int(rng.integers(8, 48))) for i in range(n)]


def _probe_s() -> float:
    """Seconds of a fixed small torch workload (matrices the size of the tiny model's, median of 15
    repeats): how fast the host runs torch right now."""
    import torch

    x, w = torch.randn(128, 512), torch.randn(512, 2048)
    times = []
    for _ in range(15):
        t0 = time.perf_counter()
        for _ in range(5):
            x @ w
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _waited(pids: set[int]) -> tuple[float, float]:
    """(seconds run, seconds waited for a CPU while runnable) of every thread of `pids` so far
    (/proc/PID/task/*/schedstat): how much the host's other work held the engine back."""
    ran = waited = 0
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").glob("*/schedstat"):
            try:
                r, w, _ = map(int, task.read_text().split())
            except (OSError, ValueError):
                continue  # a thread gone meanwhile
            ran, waited = ran + r, waited + w
    return ran / 1e9, waited / 1e9


def _children() -> set[int]:
    out = subprocess.run(["pgrep", "-P", str(os.getpid())], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


def _measure(tmp, alone_block, max_num_seqs: int, qps: float, seed: int):
    reqs = _poisson(40, qps, seed)
    spec = LiveServerSpec(kind="inrepo", scheduler=SchedulerConfig("sarathi", max_num_seqs=max_num_seqs, token_budget=256),
                          model="tiny-llama", max_model_len=512, ready_timeout_s=120,
                          config=ServerConfig(executor="torch", kv_capacity_tokens=16384))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # dispatch-lag warnings on a shared 2-core machine
        kids = _children()
        with serve(spec) as endpoint:
            engine = _children() - kids  # the server this run started
            # A warm-up run first, discarded: PyTorch on CPU builds its kernels for each new shape the first
            # time it meets it, which made the first seconds of a run several times slower than the rest.
            run_live_result(_poisson(24, qps, seed + 100), endpoint, LoadOptions(progress=False, strict=False))
            # The measured run, with its host-speed probes, with the other xdist workers idle (tests/conftest.py);
            # the server's start, the warm-up and everything judged from the run files go on beside them.
            with alone_block():
                before, sched = _probe_s(), _waited(engine)
                res = run_live_result(reqs, endpoint, LoadOptions(progress=False, strict=False))
                ran, waited = (b - a for a, b in zip(sched, _waited(engine)))
                probes = {"probe_s": [before, _probe_s()], "stretch": (ran + waited) / ran if ran > 0 else 1.0}
    assert [r.error for r in res.records] == [None] * len(reqs)
    path = tmp / f"torch_seqs{max_num_seqs}_qps{qps:g}.jsonl"
    write_jsonl(path, res.records)
    path.with_suffix(".speed.json").write_text(json.dumps(probes))
    return path, res.records


def _off(error: float) -> float:
    """How far off a signed relative error is, as |log(sim / real)|: 2x too slow and 2x too fast alike."""
    return abs(math.log(1.0 + error))


def _harness(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, alone_block):
    tmp = tmp_path_factory.mktemp("validate")
    return tmp, _measure(tmp, alone_block, *FIRST), _measure(tmp, alone_block, *SECOND)


@pytest.fixture(scope="module")
def steady_host(runs):
    """The ratio of the host's speed between the two runs (>= 1); skips where it moved more than STEADY."""
    _, (first, _), (second, _) = runs
    seen = [json.loads(p.with_suffix(".speed.json").read_text()) for p in (first, second)]
    speed = [float(np.mean(s["probe_s"])) for s in seen]
    stretch = [s["stretch"] for s in seen]
    ratio = max(max(speed) / min(speed), max(stretch) / min(stretch))
    print(f"host: probe {speed[0] * 1e3:.1f} ms, then {speed[1] * 1e3:.1f} ms; engine's (run + wait for a CPU) / run "
          f"{stretch[0]:.2f}, then {stretch[1]:.2f}")
    if ratio > STEADY:
        pytest.skip(f"the host's speed moved {ratio:.2f}x between the two runs (over {STEADY}x; probe "
                    f"{speed[0] * 1e3:.1f} ms, then {speed[1] * 1e3:.1f} ms; the engine waited for a CPU "
                    f"{stretch[0] - 1:.0%}, then {stretch[1] - 1:.0%} of its run time): no calibration can be "
                    "judged on them")
    return ratio


@pytest.fixture(scope="module")
def calibration(runs):
    tmp, (first, _), _ = runs
    out = tmp / "cpu_torch.json"
    p = _harness("calibrate", first, *DEPLOYMENT, f"scheduler.sarathi.max_num_seqs={FIRST[0]}", "--out", out)
    assert p.returncode == 0, p.stderr
    assert "held-out part" in p.stdout
    return out


def _validate(runs, tmp_name: str, *extra):
    tmp, _, (second, _) = runs
    out = tmp / tmp_name
    p = _harness("validate", second, *DEPLOYMENT, f"scheduler.sarathi.max_num_seqs={SECOND[0]}", "--out", out, *extra)
    assert p.returncode in (0, 1), p.stderr
    summary = json.loads((out / "summary.json").read_text())
    errors = {f"{r['metric']}.{r['stat']}": r["error"] for r in summary["rows"]}
    return summary, {k: errors[k] for k in JUDGED}, p


@pytest.mark.live
def test_calibration_predicts_a_second_rate_and_batch_limit(runs, steady_host, calibration):
    # The calibration states how well it predicts the held-out part of its own run (harness/validate/fit.py).
    # Where that is over 2x, the host's speed moved inside the calibrating run (seen in a flake hunt at load
    # ~4: held-out error 134 %, bandwidth_scale 0.176, the host steady between the runs): the harness says
    # the calibration is that poor, so a 2x prediction cannot be asked of it.
    held = json.loads(calibration.read_text())["held_out_error"]
    if not held <= FACTOR - 1:
        pytest.skip(f"the calibration's own held-out error is {held:.0%} (over {FACTOR - 1:.0%}): the host moved "
                    "inside the calibrating run")
    before, err_before, _ = _validate(runs, "uncalibrated")
    after, err_after, p = _validate(runs, "calibrated", f"perf.calibration={calibration}")
    print(f"judged errors, uncalibrated {err_before}, calibrated {err_after}; host speed moved {steady_host:.2f}x")  # shown with -s / on failure
    assert before["calibration"] == "uncalibrated"
    assert after["calibration"]["factors"] and "calibrated" in after["deployment"]
    assert all(_off(e) <= math.log(FACTOR) for e in err_after.values()), (err_before, err_after, p.stdout)
    assert max(map(_off, err_after.values())) < max(map(_off, err_before.values())), (err_before, err_after)
    assert (runs[0] / "calibrated" / "validate.png").stat().st_size > 0


def _five_times_off(f: dict[str, float]) -> dict[str, float]:
    """The fitted factors with every iteration five times slower, or, where that leaves a factor's
    bounds, five times faster."""
    for k in (5.0, 1 / 5.0):
        off = {n: v * k if n.endswith("_cpu_s") else v / k for n, v in f.items()}
        if all(FACTORS[n][1] <= v <= FACTORS[n][2] for n, v in off.items()):
            return off
    raise AssertionError(f"no 5x mistake within the factors' bounds: {f}")


@pytest.mark.live
def test_a_wrong_factor_fails(runs, steady_host, calibration, tmp_path):
    cal = json.loads(calibration.read_text())
    # The deliberate mistake: the fitted factors off by 5x, each in the slow direction (a device five times
    # slower, five times the CPU costs): every iteration five times the calibrated one. One factor alone
    # would not do: which of them carries the cost depends on the fit (vLLM's puts it in seq_cpu_s).
    # A loaded host fits slow scales (bandwidth_scale 0.031 was seen): a fifth of them would be under the
    # factor's bound, a file every command refuses, so the mistake then goes the other way (five times
    # faster). The assertion is the same either way: a prediction within 2x, made 5x off, is over 2.5x off.
    cal["factors"] = _five_times_off(cal["factors"])
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(cal))
    _, err, _ = _validate(runs, "wrong", f"perf.calibration={wrong}")
    assert any(_off(e) > math.log(FACTOR) for e in err.values()), err


@pytest.mark.live
def test_every_format_reads_the_same_run(runs, tmp_path):
    """The JSONL run file, the same run as CSV with latencies relative to each arrival (no common
    clock), as vllm bench serve's detailed JSON, and as a harness run directory, read alike."""
    from omegaconf import OmegaConf

    from harness.results.store import RunWriter, records_frame, token_frame

    _, (first, records), _ = runs
    ref = read_run(first)
    rows = [{"prompt_tokens": r.prompt_len, "output_tokens": r.output_len, "arrival_s": r.arrival_s + 100.0,
             "ttft_s": r.first_token_s - r.arrival_s, "e2e_s": r.finished_s - r.arrival_s} for r in records]
    csv = tmp_path / "run.csv"
    csv.write_text("prompt_tokens,output_tokens,arrival_s,ttft_s,e2e_s\n"
                   + "".join(f"{d['prompt_tokens']},{d['output_tokens']},{d['arrival_s']!r},{d['ttft_s']!r},{d['e2e_s']!r}\n"
                             for d in rows))
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({
        "start_times": [r.arrival_s + 5000.0 for r in records], "ttfts": [r.first_token_s - r.arrival_s for r in records],
        "latencies": [r.finished_s - r.arrival_s for r in records], "input_lens": [r.prompt_len for r in records],
        "output_lens": [r.output_len for r in records], "errors": [""] * len(records),
        "itls": [np.diff(r.token_times_s).tolist() for r in records]}))
    writer = RunWriter(tmp_path / "results", "loop")
    cfg = OmegaConf.create({"note": "a live run's config"})
    run_dir = writer.write(OmegaConf.to_yaml(cfg), {}, records_frame(records, scheduler="sarathi", seed=0, qps=FIRST[1]),
                           token_frame(records, scheduler="sarathi", seed=0, qps=FIRST[1]))
    for path, kind in ((csv, "csv"), (bench, "vllm-bench"), (run_dir, "harness")):
        other = read_run(path)
        assert other.kind == kind and len(other.records) == len(ref.records)
        for a, b in zip(ref.records, other.records):
            assert (a.prompt_len, a.output_len) == (b.prompt_len, b.output_len)
            assert np.allclose([a.arrival_s, a.first_token_s, a.finished_s], [b.arrival_s, b.first_token_s, b.finished_s],
                               atol=1e-5)
    assert read_run(bench).per_token and not read_run(csv).per_token


@pytest.mark.parametrize("edit, message", [
    (lambda lines: [lines[0].replace('"first_token_s"', '"first_tok"')] + lines[1:], "line 1, column first_token_s: missing value"),
    (lambda lines: lines[:2] + [lines[2].replace('"prompt_tokens": ', '"prompt_tokens": -')] + lines[3:],
     "line 3, column prompt_tokens"),
    (lambda lines: lines[:3] + [json.dumps(json.loads(lines[3]) | {"first_token_s": json.loads(lines[3])["arrival_s"] - 1})]
     + lines[4:], "line 4, column first_token_s: first token at"),
])
@pytest.mark.live
def test_a_bad_run_file_is_one_line_and_nothing_written(runs, tmp_path, edit, message):
    _, (first, _), _ = runs
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(edit(first.read_text().splitlines())) + "\n")
    out = tmp_path / "out"
    for command in ("validate", "calibrate"):
        p = _harness(command, bad, *DEPLOYMENT, "--out", out)
        assert p.returncode == 2, (p.stdout, p.stderr)
        assert message in p.stderr and str(bad) in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert not out.exists()


@pytest.mark.live
def test_max_error_exits_1_and_still_reports(runs):
    summary, _, p = _validate(runs, "gate", "--max-error", "0.5")  # uncalibrated: several x off
    assert p.returncode == 1 and "over --max-error 50.0%" in p.stdout
    assert summary["largest_headline_error"] > 0.5 and summary["calibration"] == "uncalibrated"


@pytest.mark.live
def test_a_calibrated_run_says_so_with_its_band(calibration, tmp_path):
    """`python -m harness` with perf.calibration: the header names it, summary.json carries it and
    each capacity's band; without it the summary says uncalibrated."""
    words = ["model.name=tiny-llama", "hardware=cpu", "hardware.cpu_flops=1e11", "hardware.cpu_bandwidth=2e10",
             "perf.stack=ideal", "scheduler=[sarathi]", "dataset.max_total_tokens=512", "max_model_len=512",
             "search.num_requests=64", "slo.tbt_s=0.5", "progress=false", "cache=false", f"results_dir={tmp_path}"]
    for extra in ([], [f"perf.calibration={calibration}"]):
        p = _harness(*words, *extra, "name=" + ("calibrated" if extra else "plain"))
        assert p.returncode == 0, p.stderr
        summary = json.loads(next(tmp_path.glob(f"{'calibrated' if extra else 'plain'}/*/summary.json")).read_text())
        band = summary["schedulers"]["sarathi"]["capacity_band_qps"]
        if extra:
            cap, err = summary["schedulers"]["sarathi"]["capacity_qps"], summary["calibration"]["held_out_error"]
            assert "calibrated" in p.stdout.splitlines()[0] and "calibrated" in summary["deployment"]
            assert band == pytest.approx([cap * max(0.0, 1 - err), cap * (1 + err)])
        else:
            assert summary["calibration"] == band == "uncalibrated" and "uncalibrated" in p.stdout


def test_a_calibration_is_refused_on_another_device():
    from common.errors import HarnessError
    from engines.perf import Deployment
    from engines.perf.calibration import Calibration
    from engines.perf.cpu_device import cpu_spec

    cal = Calibration({"flops_scale": 0.5}, 0.1, device=("h200-141g", 989e12, 4.8e12))
    with pytest.raises(HarnessError, match="fitted on h200-141g"):
        cal.apply(Deployment.create(model="tiny-llama", gpu=cpu_spec(1e11, 2e10), topology="pcie-only"))
    with pytest.raises(HarnessError, match="outside its bounds"):
        Calibration({"flops_scale": 5.0}, 0.1)
