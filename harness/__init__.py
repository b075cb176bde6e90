"""Benchmarking and reproduction harness for LLM serving schedulers."""
