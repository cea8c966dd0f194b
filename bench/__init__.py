"""Benchmarks: each prints one JSON object per line. Run one from the project
root with the virtualenv's Python, e.g. ``.venv/bin/python -m bench.claim --help``."""
