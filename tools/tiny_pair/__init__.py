"""Building the bundled tiny model pair from the Python standard library (docs/tiny-pair.md)."""
