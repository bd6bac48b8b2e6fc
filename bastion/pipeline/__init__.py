"""Pipeline helpers for Snakemake jobs: job logs and GPU slots (no Snakemake import)."""
