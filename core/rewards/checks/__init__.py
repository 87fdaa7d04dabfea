"""Checks on a parsed answer that hold for every task: the dimensions' signals, the penalties, hard-coded secrets,
dangerous advice and the external validators. The task's own checks are in core.rewards.rubric.
"""
