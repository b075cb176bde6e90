"""The layer below both `engines` and `harness`: what each of them may share without depending on
the other. Imports nothing from either."""
