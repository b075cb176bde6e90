"""One experiment planned from its typed config (harness.settings.ExperimentConfig): the plan
(`plan`: ExperimentPlan, plan_experiment, reseed), which options combine (`checks`) and which SLO
judges it (`slo`). Below the search (whose probes read the plan) and above the backends."""
from harness.experiment.checks import check_cluster_backend, check_workers, is_offline
from harness.experiment.plan import ExperimentPlan, deployment_of, plan_experiment, reseed, scheduler_configs

__all__ = ["ExperimentPlan", "check_cluster_backend", "check_workers", "deployment_of", "is_offline", "plan_experiment",
           "reseed", "scheduler_configs"]
