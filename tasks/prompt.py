"""The DevOps Architect system prompt, kept as Markdown beside this module so it can be read and edited as prose.

It lives with the tasks because every training record starts with it; the agent, eval and serving read it from here too.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

PROMPT_FILE = Path(__file__).with_name("devops-architect.md")


@lru_cache(maxsize=1)
def system_prompt() -> str:
    """The DevOps Architect system prompt used for training records, evaluation and serving."""
    return PROMPT_FILE.read_text(encoding="utf-8").strip()
