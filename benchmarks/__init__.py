"""Benchmark scripts; a package only so tests can import benchmarks.hf_server."""
