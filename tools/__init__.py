"""Procedures: building the bundled tiny pair (``tools/tiny_pair``, run as python -m tools.tiny_pair.NAME
or its shell scripts) and the shell scripts that run benchmarks on a GPU and collect their tables (``tools/gpu``)."""
