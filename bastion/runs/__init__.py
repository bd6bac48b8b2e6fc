"""One decode run: the dataclass both the CLI and the pipeline build and execute."""
