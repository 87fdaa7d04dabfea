"""The `devops-rl` command line: one module per command group, all assembled in `core.cli.main`.

Modules here import only typer and the standard library at the top; heavy libraries (torch,
transformers, verl, textual) are imported inside the commands that need them.
"""
