"""Benchmarks that `tenor bench` and benchmarks/ share: the serving benchmark."""
