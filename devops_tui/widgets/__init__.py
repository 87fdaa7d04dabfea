"""Cockpit widgets grouped by feature.

`chart.MetricChart` draws run metrics; the log tail and progress use Textual's own widgets.
"""
