"""The multi-dimensional, explainable DevOps reward (see docs/architecture.md for its contract)."""
