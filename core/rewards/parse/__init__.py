"""Parsing an answer: segments of prose and code, fenced blocks, the artifacts inside them (YAML/JSON, HCL, SQL,
shell commands, Dockerfiles) and negation in prose. Every later stage reads what this stage builds.
"""
