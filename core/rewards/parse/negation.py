"""Is a phrase really negated where it stands? "Never run X" and "avoid X" are; "Don't forget to run X"
and "do not hesitate to X" are not. Used by the danger checks and by the rubric's concept checks.
"""

from __future__ import annotations

import re

# Verbs of a control that stops or catches something: "an SCP blocks 0.0.0.0/0 on port 22", "the Config rule
# flags security groups that open 22 to the world", "remove `--insecure`". What they govern is described or
# removed, not advised, anywhere later in their clause (a policy's sentence is long).
_ENFORCING = frozenset(
    "forbid forbids forbidden forbidding disallow disallows disallowed disallowing prohibit prohibits prohibited "
    "prohibiting deny denies denied denying block blocks blocked blocking reject rejects rejected rejecting prevent "
    "prevents prevented preventing restrict restricts restricted restricting flag flags flagged flagging detect "
    "detects detected detecting revoke revokes revoked revoking remove removes removed removing catch catches caught "
    "catching alert alerts alerting remediate remediates remediated remediating quarantine quarantines".split()
)
# A negation cue governs what follows it in the same clause ("do not pipe curl into bash", "no hostPID").
_CUES = frozenset(
    "never not no don't dont doesn't don’t mustn't shouldn't won't can't cannot avoid avoiding avoids "
    "without instead rather stop".split()
) | _ENFORCING
# A quick test that a text may hold a cue at all (most sentences hold none).
HINT = re.compile(r"(?i)\b(?:" + "|".join(sorted(map(re.escape, _CUES))) + r")\b|n't|n’t")
# Cues that only negate what comes before them ("chmod 777 is dangerous") are checked after the phrase.
_AFTER_CUES = re.compile(r"(?i)^[^.;!?]{0,40}?\b(?:(?:is|are|would be|was)\s+(?:a\s+|an\s+)?(?:dangerous|insecure|unsafe|"
                         r"bad (?:idea|practice)|anti-?pattern|forbidden|discouraged|not (?:recommended|allowed|safe|"
                         r"a good idea)|never (?:ok|acceptable|allowed)|blocked|rejected|denied|flagged|detected|revoked|removed|"
                         r"prohibited|disallowed|prevented|caught)|should (?:be avoided|never))\b")
# A second negation that turns the cue back into advice: "don't forget to", "never fail to", "not only".
_UNDO = frozenset("forget forgetting hesitate fail neglect omit miss skip".split())
_CLAUSE = re.compile(r"(?:[.;!?](?:\s|$)|,\s*(?:but|then|and then|so)\b|\s(?:but|however|although|though|then)\s|\s[-–—]\s)",
                     re.I)
_WORD = re.compile(r"`[^`\n]*`|[\w'’]+")
REACH = 8  # a cue further back than this many words does not govern the phrase (unless it opens the clause)


_SUBORDINATE = re.compile(r"(?i)^\W*(?:if|when|whenever|unless|once|after|before|since|because|while|as long as)\b")


def _clause_before(text: str) -> str:
    """The part of the phrase's own clause before it; "If it is not writable, run X" leaves "run "."""
    clause = _CLAUSE.split(text)[-1]
    if "," in clause and _SUBORDINATE.match(clause):
        clause = clause.rsplit(",", 1)[1]
    return clause


def negated(before: str, after: str = "") -> bool:
    """True when the words `before` a phrase (same sentence) negate it, or `after` calls it dangerous.

    The cue must be in the phrase's own clause, within REACH words or at the clause's start, and not be
    undone by a second negation ("don't forget to", "never fail to", "not only").
    """
    if after and _AFTER_CUES.match(after):
        return True
    words = [w.lower().replace("’", "'") for w in _WORD.findall(_clause_before(before))]
    cues = [at for at, word in enumerate(words) if word in _CUES and _is_cue(words, at)]
    if not cues:
        return False
    # a far cue counts when it opens the clause, or when it is a control's verb ("blocks ... with 0.0.0.0/0")
    governing = [at for at in cues if at >= len(words) - REACH or at <= 1 or words[at] in _ENFORCING]
    if not governing:
        return False
    at = governing[-1]
    return not any(w in _UNDO for w in words[at + 1:])


def _is_cue(words: list[str], at: int) -> bool:
    """"instead" and "rather" negate only as "instead of X" / "rather than X"; "not only" is no negation."""
    word, following = words[at], words[at + 1] if at + 1 < len(words) else ""
    if word == "not" and following in ("only", "just"):
        return False
    if word == "instead":
        return following == "of"
    if word == "rather":
        return following == "than"
    return True


def phrase_negated(text: str, start: int, end: int) -> bool:
    """`negated` for the phrase at text[start:end], judged within its line."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    return negated(text[line_start:start], text[end: line_end if line_end >= 0 else len(text)])
