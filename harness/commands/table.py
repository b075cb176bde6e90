"""The table a run prints: per scheduler its capacity (or its one probe's verdict), the paper's
criterion beside P99 TTFT and completed requests a second (a probe that looks starved marked "!",
harness/starvation.py), failed requests and attainment; WARNING lines for failures, starvation and
probes a disturbed host ran."""
from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from harness.search.capacity import CapacityResult, Probe
from harness.starvation import starvation

if TYPE_CHECKING:
    from harness.commands.run import SchedulerRun


def shown_probe(result: CapacityResult, fixed: bool) -> Probe | None:
    """The probe whose token times are saved: the capacity probe (or the only one, at a fixed rate)."""
    if fixed:
        return result.probes[0]
    passing = [p for p in result.probes if p.passed and p.qps == result.capacity_qps]
    return passing[0] if passing else None


def disturbed_probes(result: CapacityResult) -> list[Probe]:
    """The probes a backend said ran on a disturbed host (the real-time twin fell behind its own
    timeline: harness/backends/live/twin_clock.py): their latencies measure the host, not the model."""
    noted = [p for p in result.probes if getattr(p.detail, "notes", ())]
    if not noted:  # a simulated run's (it need not load the live backend to know)
        return []
    from harness.backends.live.twin_clock import disturbed_note

    return [p for p in noted if disturbed_note(p.detail.notes) is not None]


def _good(v, gpus: int) -> str:
    """The attainment and goodput per GPU columns of a probe's verdict."""
    return f"{v.goodput_fraction:>10.1%}{v.goodput / gpus:>11.3g}/s"


def starved(p: Probe | None) -> str:
    """The probe's signs of starvation (harness.starvation), "" if none or no probe."""
    if p is None:
        return ""
    return starvation(p.passed, p.qps, p.detail.summary.request_throughput, p.detail.summary.ttft.p99)


def _warn(runs: list[SchedulerRun], fixed: bool) -> None:
    """The WARNING lines below the table. Failed requests are never quiet: one line per probe that
    had any (the column `failed`). A shown probe that passes the criterion but looks starved is
    said so ("!" in the table). A result that rests on disturbed probes says so beside the table,
    not only probe by probe."""
    for r in runs:
        for p in r.result.probes:
            v = p.detail.verdict
            if v.num_errors:
                kinds = ", ".join(f"{n} {k}" for k, n in v.errors.items())
                print(f"WARNING: {r.scheduler} seed {r.seed} at {p.qps:.4g} QPS: {v.num_errors} requests failed ({kinds})")
    for r in runs:
        p = shown_probe(r.result, fixed)
        why = starved(p)
        if why:
            print(f"WARNING: {r.scheduler} seed {r.seed} passes the criterion at {p.qps:.4g} QPS but looks starved: {why} "
                  "(harness/starvation.py; the verdict stays the criterion's)")
    for r in runs:
        bad = disturbed_probes(r.result)
        if bad:
            print(f"WARNING: {r.scheduler} seed {r.seed}: {len(bad)} of {len(r.result.probes)} probes ran on a disturbed "
                  f"host (at {', '.join(f'{p.qps:.4g}' for p in bad)} QPS the real-time twin fell behind its own "
                  "timeline): this result measures the host, not the model; run it again on a quieter host")


def _latency(p: Probe | None) -> str:
    """The P99 TTFT and completed-requests-per-second columns of a probe (starvation's signs)."""
    if p is None:
        return f"{'-':>10}{'-':>9}"
    s = p.detail.summary
    return f"{s.ttft.p99:>8.3g} s{s.request_throughput:>9.3g}"


def print_table(runs: list[SchedulerRun], fixed: bool, gpus: int) -> None:
    w = max([18] + [len(r.scheduler) + 2 for r in runs])  # a plugin's policy may have a long name
    good = f"{'attained':>10}{'goodput/GPU':>13}"
    signs = f"{'P99 TTFT':>10}{'done/s':>9}"
    if fixed:
        print(f"{'scheduler':<{w}}{'seed':>5}{'QPS':>9}  {'verdict':<7}{'P50 TTFT':>10}{'P99 TBT':>10}{'median delay':>14}"
              f"{signs}{'failed':>8}{good}")
        for r in runs:
            p = r.result.probes[0]
            o = p.detail
            verdict = ("pass" + ("!" if starved(p) else "")) if p.passed else "FAIL"
            print(f"{r.scheduler:<{w}}{r.seed:>5}{p.qps:>9.4g}  {verdict:<7}"
                  f"{o.summary.ttft.p50:>8.3f} s{o.verdict.tbt_s:>8.3f} s{o.verdict.scheduling_delay_s:>12.3f} s"
                  f"{_latency(p)}{o.verdict.num_errors:>8}{_good(o.verdict, gpus)}")
        _warn(runs, fixed)
        return
    print(f"{'scheduler':<{w}}{'seed':>5}{'capacity (QPS)':>16}  {'bracket (pass, fail)':<22}{'probes':>7}  {'P99 TBT':>9}  "
          f"{'median delay':>12}{signs}{'failed':>8}{good}")
    for r in runs:
        res = r.result
        cap = shown_probe(res, fixed=False)
        hi = "none" if res.saturated else f"{res.lowest_failing_qps:.4g}"
        cap_str = f"{res.capacity_qps:.4g}" + ("+" if res.saturated else "") + ("!" if starved(cap) else "")
        tbt = f"{cap.detail.verdict.tbt_s:.3f} s" if cap else "-"
        delay = f"{cap.detail.verdict.scheduling_delay_s:.3f} s" if cap else "-"
        failed = sum(p.detail.verdict.num_errors for p in res.probes)
        good_cols = _good(cap.detail.verdict, gpus) if cap else f"{'-':>10}{'-':>13}"
        print(f"{r.scheduler:<{w}}{r.seed:>5}{cap_str:>16}  {f'[{res.capacity_qps:.4g}, {hi})':<22}{len(res.probes):>7}  {tbt:>9}  "
              f"{delay:>12}{_latency(cap)}{failed:>8}{good_cols}")
    _warn(runs, fixed)
    by_name: dict[str, list[float]] = {}
    for r in runs:
        by_name.setdefault(r.scheduler, []).append(r.result.capacity_qps)
    if any(len(v) > 1 for v in by_name.values()):
        for name, caps in by_name.items():
            print(f"{name:<{w}} mean capacity {statistics.fmean(caps):.4g} QPS, std {statistics.stdev(caps):.3g} over {len(caps)} seeds")
    # The paper's headline: Sarathi-Serve's capacity over each baseline (mean over seeds).
    mean = {name: statistics.fmean(caps) for name, caps in by_name.items()}
    if mean.get("sarathi", 0) > 0:
        ratios = [f"{mean['sarathi'] / cap:.2f}x {name}" for name, cap in mean.items() if name != "sarathi" and cap > 0]
        if ratios:
            print("sarathi capacity: " + ", ".join(ratios))
