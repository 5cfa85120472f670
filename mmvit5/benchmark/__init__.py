"""Measurement code that tools/benchmark.py and tools/dry_run.py drive."""
