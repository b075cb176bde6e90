"""Error bars: a prediction made with a calibration carries the band of its held-out error; one made
without says it is uncalibrated (the datasheet model, whose error against this engine is unknown)."""
from __future__ import annotations

from engines.perf.calibration import Calibration

UNCALIBRATED = "uncalibrated"


def band(calibration: Calibration | None, value: float | None) -> list[float] | str | None:
    """[low, high] at the calibration's held-out error, or "uncalibrated"."""
    if value is None:
        return None
    if calibration is None:
        return UNCALIBRATED
    return list(calibration.band(float(value)))


def calibration_entry(calibration: Calibration | None) -> dict | str:
    """What summary.json says of the model's calibration."""
    return UNCALIBRATED if calibration is None else calibration.to_json() | {"path": calibration.path}


def capacity_bands(calibration: Calibration | None, capacities: dict[str, float]) -> str:
    if calibration is None:
        return "capacities: uncalibrated (the datasheet model; python -m harness calibrate fits one to your engine)"
    parts = [f"{name} {cap:.3g} QPS ({lo:.3g}-{hi:.3g})" for name, cap in capacities.items()
             for lo, hi in [calibration.band(cap)]]
    return f"capacities at the calibration's held-out error ±{100 * calibration.held_out_error:.0f}%: " + ", ".join(parts)
