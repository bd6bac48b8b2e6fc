"""Measuring the device: peak rates, the verification latency grid, step overheads, fingerprints and the calibration file."""
