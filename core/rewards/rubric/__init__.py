"""A task's rubric: 4-10 criteria (id, description, weight, check), each scored 0-1 with partial credit on
the parsed answer; the rubric score is what decides most of the reward (docs/reward.md, "Writing a rubric").

Check kinds: `concept` (alternatives, matched in substantive text only), `yaml` and `hcl` (JMESPath over the
parsed documents), `sql` (parsed statements), `shell` (parsed commands and their flags), `dockerfile`
(instructions), `pattern` (a regex in valid code or substantive prose), `relation` (a named predicate over the
artifacts: selectors that match, a rollout that can progress, ...), and `forbid` (any of those must not
hold: it takes points off instead of adding them). A list of checks means "any of these" (other tools). A
`decisive: true` criterion that fails caps the final reward at DECISIVE_CAP.
"""

from core.rewards.rubric.compile import (
    CHECK_KINDS,
    Criterion,
    RubricError,
    compile_check,
    compile_rubric,
    query_warnings,
    rubric_problems,
    rubric_warnings,
)
from core.rewards.rubric.scoring import DECISIVE_CAP, CriterionResult, decisive_cap, evaluate

__all__ = ["CHECK_KINDS", "DECISIVE_CAP", "Criterion", "CriterionResult", "RubricError", "compile_check", "compile_rubric",
           "decisive_cap", "evaluate", "query_warnings", "rubric_problems", "rubric_warnings"]
