"""A calibration: a few named deployment factors fitted from one measured run of the user's engine
(`python -m harness calibrate`), applied on top of the datasheet model (`perf.calibration=PATH`).

Never a default: the model's own numbers stay those of datasheets and operator measurements; a
calibration is the user's fit, carried with the error it showed on the part of the run it was not
fitted on, and named wherever a result computed with it is printed or saved.

The factors (each with physical bounds, so a fit cannot wander into a meaningless corner):

  flops_scale      achievable FLOP/s as a fraction of the model's (GEMM and attention efficiency
                   of this engine's kernels on this device): compute-bound work, i.e. prefill
  bandwidth_scale  achievable memory bandwidth as a fraction of the model's (weights streamed by
                   decode GEMMs, KV reads, elementwise kernels): memory-bound work, i.e. decode
  step_cpu_s       seconds every iteration adds outside the kernels (scheduling, Python, input
                   preparation, kernel launches not captured in graphs, sampling)
  seq_cpu_s        seconds each sequence of the batch adds to an iteration's CPU time
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from common.errors import HarnessError

from .deployment import Deployment

# name: (meaning, lower bound, upper bound). Scales above 1 are allowed up to 2 (a model that is
# pessimistic about a kernel); below 0.01 a device would be a hundred times slower than its model,
# which says the deployment named is the wrong one rather than that a factor is off.
FACTORS: dict[str, tuple[str, float, float]] = {
    "flops_scale": ("achievable FLOP/s / the model's (GEMM, attention efficiency)", 0.01, 2.0),
    "bandwidth_scale": ("achievable memory bandwidth / the model's (weights, KV, elementwise)", 0.01, 2.0),
    "step_cpu_s": ("CPU seconds every iteration adds (scheduling, Python, launches, sampling)", 0.0, 1.0),
    "seq_cpu_s": ("CPU seconds each sequence of the batch adds to an iteration", 0.0, 0.05),
}
FORMAT = "sarathi-harness calibration v1"


@dataclass(frozen=True)
class Calibration:
    factors: dict[str, float]
    held_out_error: float  # the largest |relative error| of the headline statistics on the held-out part
    source: str = ""  # the run file it was fitted on
    fitted_on: str = ""  # which part of it (e.g. "requests arriving before 10.2 s: 64 of 128")
    held_out: dict[str, float] = field(default_factory=dict)  # statistic -> signed relative error
    fit_error: float = float("nan")  # the same measure on the fitted part
    path: str = ""  # where it was read from (not saved)
    # The device the factors scale: (name, peak FLOP/s, memory B/s) of the deployment it was fitted on.
    # Applied to that device with the same numbers even where a probe (hardware=cpu) measures others
    # now; refused on another device, whose numbers the factors do not describe.
    device: tuple[str, float, float] | None = None

    def __post_init__(self) -> None:
        for name, value in self.factors.items():
            if name not in FACTORS:
                raise HarnessError(f"calibration: unknown factor {name!r}; known: {', '.join(FACTORS)}")
            _, lo, hi = FACTORS[name]
            if not (isinstance(value, (int, float)) and math.isfinite(value) and lo <= value <= hi):
                raise HarnessError(f"calibration: {name}={value!r} outside its bounds [{lo:g}, {hi:g}]")
        if not (math.isfinite(self.held_out_error) and self.held_out_error >= 0):
            raise HarnessError(f"calibration: held_out_error must be a number >= 0, got {self.held_out_error!r}")

    def apply(self, d: Deployment) -> Deployment:
        """The deployment with this calibration's factors: the device's FLOP/s and bandwidth scaled,
        the engine's CPU costs replaced."""
        f = self.factors
        fs, bs = f.get("flops_scale", 1.0), f.get("bandwidth_scale", 1.0)
        flops, bandwidth = d.gpu.peak_flops, d.gpu.hbm_bandwidth
        if self.device is not None:
            name, flops, bandwidth = self.device
            if name != d.gpu.name:
                raise HarnessError(f"perf.calibration {self.path or ''}: fitted on {name}, not on {d.gpu.name}: "
                                   f"calibrate on a run of this device")
        fp8 = d.gpu.fp8_peak_flops
        gpu = replace(d.gpu, peak_flops=flops * fs, hbm_bandwidth=bandwidth * bs,
                      fp8_peak_flops=None if fp8 is None else fp8 * flops / d.gpu.peak_flops * fs)
        cpu = {k: v for k, v in (("cpu_overhead_s", f.get("step_cpu_s")), ("cpu_overhead_per_seq_s", f.get("seq_cpu_s")))
               if v is not None}
        return replace(d, gpu=gpu, **cpu)

    def band(self, value: float) -> tuple[float, float]:
        """The range a prediction `value` carries at this calibration's held-out error."""
        e = self.held_out_error
        return value * max(0.0, 1.0 - e), value * (1.0 + e)

    def describe(self) -> str:
        where = f" {self.path}" if self.path else ""
        return (f"calibrated{where} ({describe_factors(self.factors)}; held-out error ±{100 * self.held_out_error:.0f}%)")

    def to_json(self) -> dict:
        return {"format": FORMAT, "factors": self.factors, "held_out_error": self.held_out_error, "source": self.source,
                "fitted_on": self.fitted_on, "held_out": self.held_out, "fit_error": self.fit_error,
                "device": None if self.device is None else dict(zip(("name", "peak_flops", "bandwidth"), self.device)),
                "meanings": {k: FACTORS[k][0] for k in self.factors}}


def describe_factors(factors: dict[str, float]) -> str:
    def one(k: str, v: float) -> str:
        return f"{k} {v * 1e3:.3g} ms" if k.endswith("_s") else f"{k} {v:.3g}"
    return ", ".join(one(k, v) for k, v in factors.items())


def load_calibration(path: str | Path) -> Calibration:
    p = Path(path)
    if not p.is_file():
        raise HarnessError(f"perf.calibration: no such file: {path}")
    try:
        obj = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise HarnessError(f"perf.calibration: {path}: not JSON ({e})") from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise HarnessError(f"perf.calibration: {path}: not a calibration file (expected format {FORMAT!r}; "
                           f"python -m harness calibrate writes one)")
    try:
        dev = obj.get("device")
        device = None if dev is None else (str(dev["name"]), float(dev["peak_flops"]), float(dev["bandwidth"]))
        return Calibration(device=device, factors={str(k): float(v) for k, v in dict(obj["factors"]).items()},
                           held_out_error=float(obj["held_out_error"]), source=str(obj.get("source", "")),
                           fitted_on=str(obj.get("fitted_on", "")), held_out=dict(obj.get("held_out") or {}),
                           fit_error=float(obj.get("fit_error", math.nan)), path=str(path))
    except (KeyError, TypeError, ValueError) as e:
        raise HarnessError(f"perf.calibration: {path}: bad or missing field ({e})") from None
