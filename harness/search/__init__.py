"""The capacity search: plan an experiment from its config (`plan`), run probes through any
backend (`probe`), cache them (`cache`), bracket and bisect the rate (`capacity`)."""
