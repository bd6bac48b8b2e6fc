"""The verification cost model: roofline shapes of a decoder-only transformer and the calibrated max-of-two-lines fit."""
