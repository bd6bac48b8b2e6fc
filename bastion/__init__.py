"""BASTION reproduction: budget-aware tree speculative decoding on DFlash drafters."""

__version__ = "0.1.0"
