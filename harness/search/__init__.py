"""The capacity search of a planned experiment (harness.experiment): run probes through any
backend (`probe`), cache them (`cache`), bracket and bisect the rate (`capacity`)."""
