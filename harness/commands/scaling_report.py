"""An autoscaled fleet's short table (cluster.autoscale): its windows grouped into at most
MAX_ROWS rows, each with the fleet's range of serving replicas, the most warming and draining,
the SLO attainment of the samples in it, its GPU-hours and their cost; then the run's totals."""
from __future__ import annotations

import math

MAX_ROWS = 12


def print_scaling_tables(runs, shown) -> None:
    """`runs`: the SchedulerRuns of the table; `shown(result)`: the probe it shows, or None."""
    for r in runs:
        probe = shown(r.result)
        if probe is None or probe.detail.scaling is None:
            continue
        a = probe.detail.scaling
        rows = a["windows"]
        per = max(1, math.ceil(len(rows) / MAX_ROWS))
        print(f"{r.scheduler} at {probe.qps:.4g} QPS, autoscaled by {a['policy']} in [{a['min_replicas']}, "
              f"{a['max_replicas']}] (cold start {a['cold_start_s']:.1f} s, a decision every {a['interval_s']:g} s):")
        print(f"  {'from':>10} {'to':>10} {'serving':>8} {'warming':>8} {'draining':>9} {'worst att.':>11} "
              f"{'GPU-hours':>10} {'cost $':>9}")
        for i in range(0, len(rows), per):
            group = rows[i:i + per]
            samples = [w["attainment"] for w in group if w["attainment"] is not None]
            serving = sorted({w["serving"] for w in group})
            span = f"{serving[0]}" if len(serving) == 1 else f"{serving[0]}-{serving[-1]}"
            hours = sum(w["gpu_hours"] for w in group)
            att = f"{min(samples):.1%}" if samples else "-"  # the window group's worst
            print(f"  {group[0]['start_s']:>9.0f}s {group[-1]['start_s'] + a['interval_s']:>9.0f}s {span:>8} "
                  f"{max(w['warming'] for w in group):>8} {max(w['draining'] for w in group):>9} {att:>11} "
                  f"{hours:>10.3f} {hours * a['gpu_hour_usd']:>9.2f}")
        print(f"  total {a['gpu_hours']:.3f} GPU-hours, ${a['cost_usd']:.2f} at ${a['gpu_hour_usd']:.2f}/GPU-hour, "
              f"{len(a['replicas'])} replica{'s' if len(a['replicas']) != 1 else ''} started in all")
