"""Decoders: eager, static and compiled engines running the same step functions behind one Decoder protocol."""
