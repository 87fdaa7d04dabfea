"""The reward's execution tier: engines that run an answer's artifacts (promtool on rule groups, a sandboxed
shell on scripts, nginx on server blocks,
postgres on SQL migrations) against scenarios written in the task; the rubric's `run:` criteria call them.
"""

from core.rewards.engines import nginx, postgres, promtool, shell
from core.rewards.engines.base import (
    CACHE,
    ENGINES,
    Artifact,
    Engine,
    EngineResult,
    engine_missing,
    forget_availability,
    run_engine,
)

__all__ = ["CACHE", "ENGINES", "Artifact", "Engine", "EngineResult", "engine_missing", "forget_availability",
           "nginx", "postgres", "promtool", "run_engine", "shell"]
