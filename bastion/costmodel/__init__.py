"""The verification cost model: roofline terms of a decoder-only transformer, the calibrated model (the layers' max of two lines plus attention over the cache) and its fit."""
