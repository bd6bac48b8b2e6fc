"""Test helpers shared across the suite: tiny random models, pipeline checkouts, a SLURM cluster."""
