"""The capacity search: plan an experiment from its config (`experiment`), run probes through any
backend (`probe`), cache them (`cache`), bracket and bisect the rate (`capacity`)."""
