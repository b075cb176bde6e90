"""Where jobs and probes run: each job's resource request derived from its deployment
(`resources`), Ray (`ray_session`) and submitit/SLURM (`submitit_jobs`, `slurm`) sessions, the
Hydra launchers' work (`hydra_jobs`, behind hydra_plugins/harness_launchers) and their config
schemas (`config`), and what a job sends back (`outcome`). Imports neither the search nor the
commands; Ray and submitit are imported only when used (the `cluster` extra)."""
