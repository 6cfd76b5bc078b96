"""Disaggregated serving: prefill on one server, decode on another, KV blocks moved between."""
