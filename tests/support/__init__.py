"""Test tooling kept out of the wheel (tests and benchmarks import it with tests/ on sys.path)."""
