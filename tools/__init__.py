"""Project tooling: the scripts that build the bundled tiny pair (run as python -m tools.tiny_pair.NAME)."""
