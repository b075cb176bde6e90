"""A measured run against the simulator: `python -m harness validate` and `calibrate` (docs/validate.md)."""
