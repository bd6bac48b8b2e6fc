"""Aggregation, tables and figures from decode records (torch-free)."""
