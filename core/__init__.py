"""Core of devops-rl: tasks, rewards, agent and training, with no user-interface code.

The command line (`core.cli`) and the cockpit (`devops_tui`) are two thin faces over this package.
"""

__version__ = "0.1.0"
