"""Engine-agnostic speculative-decoding maths on tensors: draft trees, the budget rule, path ranking, acceptance."""
