"""`python -m harness.data`: dataset statistics, samples, and trace building (see cli.py)."""
