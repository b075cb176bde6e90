"""The performance model an experiment asks for (`perf.kind`): analytical, or a measured profile."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from common.errors import HarnessError

from .analytical import PerfModel
from .deployment import Deployment
from .measured import ProfilePerfModel


def build_perf_model(deployment: Deployment, perf_cfg: Mapping | None = None) -> PerfModel:
    """The `perf` config group: {kind: analytical} (default) or {kind: profile, path: FILE_OR_DIR}."""
    try:
        kind = str((perf_cfg or {}).get("kind", "analytical"))
    except Exception as e:  # omegaconf errors on interpolation / missing values
        raise HarnessError(f"perf: {e}") from None
    if kind == "analytical":
        if deployment.ep:  # DP ranks sharing expert-parallel MoE layers
            from .expert_parallel import ExpertParallelModel
            return ExpertParallelModel(deployment)
        return PerfModel(deployment)
    if kind == "profile":
        try:
            path = perf_cfg.get("path")
        except Exception:  # omegaconf MissingMandatoryValue for `???`
            path = None
        if path in (None, "", "???"):
            raise HarnessError("perf=profile needs perf.path=<profile CSV or Vidur profile directory>")
        if deployment.model.is_moe or deployment.ep or deployment.weight_dtype or deployment.kv_dtype:
            raise HarnessError("perf=profile prices 16-bit dense models (the operators a profile measures); "
                               f"{deployment.model.name} with MoE or FP8 needs perf=analytical")
        return ProfilePerfModel(deployment, Path(str(path)))
    raise HarnessError(f"perf.kind must be 'analytical' or 'profile', got {kind!r}")
