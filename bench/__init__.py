"""Benchmarks for Parley. Run them as modules, e.g. `python -m bench.turn_overhead`."""
