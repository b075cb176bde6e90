"""Hydra plugins of the harness: launchers with per-job resource requests and a sweeper that
reports every job (launchers.py). Hydra finds them by scanning the hydra_plugins namespace."""
