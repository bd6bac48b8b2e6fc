"""Target models: the registry of known pairs, loading, and the target wrapper that taps hidden states."""
