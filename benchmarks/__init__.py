"""Measurement scripts (run as python -m benchmarks.NAME); each prints and writes a table."""
