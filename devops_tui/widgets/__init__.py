"""Cockpit widgets grouped by feature: charts, the log tail, run progress."""
