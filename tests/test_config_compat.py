"""Configs saved by older versions keep working: a retired key is accepted, a field added since is
no difference, a value that differs is; and plans the backends cannot serve fail before anything runs."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from common.errors import HarnessError
from harness.config.experiment import backend_settings
from harness.commands.jobs import find_run
from harness.config import compose
from harness.config import plan_experiment


def test_an_old_live_config_with_its_retired_key_still_plans():
    assert backend_settings({"name": "live", "fast_forward": True, "time_scale": 4.0}).time_scale == 4.0
    with pytest.raises(HarnessError, match="unknown key 'fast_forwrd'"):
        backend_settings({"name": "live", "fast_forwrd": True})


def _saved(tmp_path, name: str, cfg) -> None:
    run = tmp_path / "yi34b_tp2_strict" / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    (run / "summary.json").write_text("{}")


def test_find_run_ignores_fields_added_since_but_not_changed_values(tmp_path):
    cfg = compose(["experiment=yi34b_tp2_strict", f"results_dir={tmp_path}"])
    older = OmegaConf.to_container(cfg)
    del older["search"]["max_error_fraction"]  # saved before the field existed
    _saved(tmp_path, "20260101-000000", older)
    assert find_run(cfg).name == "20260101-000000"
    other = compose(["experiment=yi34b_tp2_strict", f"results_dir={tmp_path}", "search.num_requests=64"])
    assert find_run(other) is None


def test_a_plan_no_backend_can_serve_fails_at_planning():
    with pytest.raises(HarnessError, match="closed_loop is simulated for one engine"):
        plan_experiment(compose(["experiment=yi34b_tp2_strict", "arrival=closed_loop", "cluster.instances=2"]))
    with pytest.raises(HarnessError, match="pp=1 only"):
        plan_experiment(compose(["experiment=llama2_70b_tp4pp2_strict", "backend=live"]))
