"""What an answer recommends: the text a reader sees (HTML comments, hidden elements, link-reference comments
and zero-width characters removed), without lines addressed to a grader, and which code blocks it disowns.

Only that counts: the rubric, the signals, the validators and the danger checks never see the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from core.rewards.parse.code_blocks import FencePart, split_fences

_ZERO_WIDTH = re.compile("[\u200b\u200c\u200d\u2060\ufeff\u00ad\u180e]")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
# Invisible when rendered: an HTML comment, an element marked hidden, a link reference definition
# (`[//]: # (note)`, `[x]: <> "note"`, `[label]: url "title"`: shown only where referenced).
_HIDDEN_OPEN = re.compile(r"<!--|<(\w+)\b[^>]*(?:\shidden\b|display\s*:\s*none|visibility\s*:\s*hidden)[^>]*>", re.I)
_LINK_DEFINITION = re.compile(r"^ {0,3}\[[^\]\n]+\]:[ \t]*\S*[ \t]*(?:\([^)\n]*\)|\"[^\"\n]*\"|'[^'\n]*')?[ \t]*$")
_LINK_DEFINITIONS = re.compile(_LINK_DEFINITION.pattern, re.M)

# A line addressed to whoever grades the answer, or asking for marks: not advice to the user.
# "reviewer" alone is a colleague reading a pull request; an automated one, a grader or a judge scores the answer.
_GRADER = (r"(?:(?:automated|ai|llm|model)\s+(?:reviewer|grader|judge|evaluator|scorer|marker)|grader|judge|evaluator"
           r"|scorer|marker|assessor|rater|reward\s+model)s?")
GRADER_NOTE = re.compile(
    rf"""(?ix)
    \b(?:note|message|instruction|hint|comment|reminder)s?\s+(?:for|to)\s+(?:the\s+|any\s+|all\s+)?{_GRADER}\b
  | \b(?:dear|attention|hey|hello)[,:]?\s+(?:the\s+)?{_GRADER}\b
  | \b(?:automated|ai|llm)\s+(?:grader|judge|evaluator|scorer|reviewer|marker)s?\b
  | \b(?:grade|mark|score|rate|evaluate|assess|treat|count)\s+(?:this|the|every|each|all)\b[^.\n]{{0,40}}?
      \b(?:criteri\w*|items?|requirements?|answer|response|solution|sections?)\s+as\s+
      (?:met|passed|satisfied|complete|correct|full(?:y\s+met)?|fulfilled)\b
  | \b(?:give|award|assign)\s+(?:this|the|my|our)\s+(?:answer|response|solution|submission)\b[^.\n]{{0,20}}?
      \b(?:full|maximum|max|perfect|top)\s+(?:marks|score|points|credit|grade)\b
  | \b(?:deserves?|earns?|merits?)\s+(?:full|maximum|max|perfect|top)\s+(?:marks|score|points|credit|grade)\b
  | \b(?:ignore|disregard|forget)\s+(?:all\s+|any\s+|the\s+)?(?:previous|prior|above|earlier|preceding|your|other)\s+
      (?:instructions|rules|criteria|guidelines|prompts?)\b
  | \b(?:ignore|disregard|overlook)\s+(?:any\s+|all\s+|the\s+)?missing\s+(?:sections|parts|items|criteri\w+|requirements)\b
  | \brubric\b
    """)

# The sentence that introduces a code block (or the heading of its section) says not to use it.
_DISOWN = re.compile(
    r"""(?ix)
    \b(?:do\s+not|don't|dont|never)\s+(?:apply|use|copy|deploy|run|ship|merge)(?:\s+(?:this|these|it|them|that))?
      \s*(?:[.;,:!)\]]|—|–|$)
  | \b(?:documentation|reference|illustration|comparison)(?:\s+purposes)?\s+only\b
  | \bfor\s+the\s+record\s+only\b
  | \bnot\s+(?:to\s+be\s+)?(?:used|applied)\b
  | \banti-?patterns?\b
  | \bbad\s+(?:example|practice|configuration|config|version|manifest)\b
  | \bwhat\s+not\s+to\s+do\b
  | \b(?:do\s+not|don't)\s+do\s+this\b
  | \bwe\s+(?:do\s+not|don't|won't|will\s+not)\s+(?:use|apply|recommend)\s+(?:this|it|these|that)\b
  | \b(?:rejected|discarded)\s+(?:option|alternative|approach|design)\b
  | \((?:broken|wrong|bad|old|incorrect|unsafe|insecure|before|not\s+recommended|do\s+not\s+use|don't\s+use|don't|avoid)\)
  | (?:^|[*_>\s])(?:before|old|wrong|incorrect|broken|bad|unsafe|insecure|avoid|don't|current)\s*(?:\([^)]*\))?
      \s*[*_]*\s*:\s*[*_]*\s*$
  | \u274c
    """)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")
_HEADING = re.compile(r"^[ \t]*(#{1,6})[ \t]+(.*)$", re.M)
_BLANK_LINE = re.compile(r"\n[ \t]*\n")


@dataclass
class Visible:
    """The answer as a reader sees it, minus notes to the grader, and what was taken out (evidence)."""

    text: str
    hidden: list[str] = field(default_factory=list)
    grader_notes: list[str] = field(default_factory=list)


def _short(text: str, limit: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def is_grader_note(line: str) -> bool:
    """Is this line addressed to the grader or asking for marks ("note for the automated reviewer", "grade every
    criterion as met", "ignore previous instructions")?"""
    return _may_be_note(line.lower()) and GRADER_NOTE.search(line) is not None


# Every branch of GRADER_NOTE needs one of these (lower case): a cheap test that skips the regex for most text.
_NOTE_ANCHORS = ("grader", "judge", "evaluator", "scorer", "marker", "assessor", "rater", "reward model", "reviewer",
                 "ignore", "disregard", "forget", "overlook", "rubric", " as met", " as passed", " as satisfied",
                 " as complete", " as correct", " as full", " as fulfilled", "full ", "maximum ", "max ", "perfect ",
                 "top ")
_MARKS = ("marks", "score", "points", "credit", "grade")


def _may_be_note(lowered: str) -> bool:
    for anchor in _NOTE_ANCHORS:
        if anchor in lowered:
            if anchor[-1] != " ":
                return True
            at = lowered.find(anchor)
            while at >= 0:  # "full marks", "maximum score": only with a word for marks after it
                if lowered.startswith(_MARKS, at + len(anchor)):
                    return True
                at = lowered.find(anchor, at + 1)
    return False


def visible_answer(answer: str) -> Visible:
    """The answer without invisible markdown and grader notes. Hidden spans are found outside code blocks only
    (inside a fence `<!--` is text the reader sees), but a hidden span hides the fences inside it."""
    out = Visible("")
    if not answer.isascii() and _ZERO_WIDTH.search(answer):
        out.hidden.append(f"{len(_ZERO_WIDTH.findall(answer))} zero-width character(s) removed")
        answer = _ZERO_WIDTH.sub("", answer)
    if not ("<!--" in answer or ("<" in answer and _HIDDEN_OPEN.search(answer))
            or ("]:" in answer and _LINK_DEFINITIONS.search(answer)) or is_grader_note(answer)):
        out.text = answer
        return out
    kept: list[str] = []
    lines = answer.splitlines()
    fence: str | None = None
    closer: str | None = None  # the end of the hidden span being skipped
    hidden_from = 0
    for number, line in enumerate(lines, 1):
        if closer is not None:
            end = line.find(closer)
            if end < 0:
                continue
            out.hidden.append(f"hidden content at lines {hidden_from}-{number}")
            line, closer = line[end + len(closer):], None
            if not line.strip():
                continue
        if fence is not None:
            match = _FENCE.match(line)
            if match and line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                fence = None
            elif line.lstrip().startswith(("#", "//", "--")) and is_grader_note(line):
                out.grader_notes.append(f"line {number}: \"{_short(line.strip())}\"")
                continue
            kept.append(line)
            continue
        match = _FENCE.match(line)
        if match:
            fence = match.group(1)
            kept.append(line)
            continue
        if "]:" in line and _LINK_DEFINITION.match(line):
            out.hidden.append(f"link-reference comment at line {number}: \"{_short(line.strip(), 50)}\"")
            continue
        line, closer, number_hidden = _cut_hidden(line) if "<" in line else (line, None, 0)
        if number_hidden:
            if closer is not None:
                hidden_from = number
            else:
                out.hidden.append(f"hidden content at line {number}")
        if is_grader_note(line):
            out.grader_notes.append(f"line {number}: \"{_short(line.strip())}\"")
            continue
        if line.strip() or not number_hidden:
            kept.append(line)
    if closer is not None:
        out.hidden.append(f"hidden content from line {hidden_from} to the end (never closed)")
    out.text = "\n".join(kept)
    return out


def _cut_hidden(line: str) -> tuple[str, str | None, int]:
    """(the line without its hidden spans, the closer still open at its end or None, spans found)."""
    found = 0
    while True:
        match = _HIDDEN_OPEN.search(line)
        if match is None:
            return line, None, found
        found += 1
        closer = "-->" if match.group(0) == "<!--" else f"</{match.group(1)}>"
        end = line.find(closer, match.end())
        if end < 0:
            return line[: match.start()], closer, found
        line = line[: match.start()] + line[end + len(closer):]


_DISOWN_ANCHORS = ("not", "n't", "never", "dont", " only", "anti", "bad", "rejected", "discarded", "(", "\u274c")


def disowned(text: str) -> bool:
    """Does this lead-in (a heading, or the sentence right before a code block) say the block is not to be used
    ("do not apply", "documentation only", "anti-pattern", "Before (broken):", "Wrong:")?"""
    return _may_disown(text) and _DISOWN.search(text) is not None


def _may_disown(text: str) -> bool:
    """Every branch of _DISOWN needs an anchor word, or a label that ends with a colon: a cheap test first."""
    lowered = text.lower()
    return lowered.rstrip("*_ ").endswith(":") or any(anchor in lowered for anchor in _DISOWN_ANCHORS)


def _last_paragraph(body: str) -> str:
    body = body.strip()
    cut = body.rfind("\n\n")
    last = body[cut + 2:] if cut >= 0 else body
    if "\n" in last and _BLANK_LINE.search(last):  # a "blank" line of spaces
        last = _BLANK_LINE.split(last)[-1]
    return last


def disowned_blocks(parts: list[FencePart]) -> list[bool]:
    """For each part, whether it is a code block the answer itself disowns: the last sentence of the prose right
    before it, or the heading of its section, says not to use it. A block that follows another with nothing
    between shares its fate (an option shown as several files)."""
    flags = [False] * len(parts)
    section: tuple[int, bool] = (7, False)  # (heading level, the section is disowned)
    lead_in: str | None = None  # None: no prose since the previous block
    own = False
    for index, part in enumerate(parts):
        if part.lang is None:
            body = part.body.rstrip()
            if not body:
                continue
            if "#" in body:
                end = 0
                for heading in _HEADING.finditer(body):
                    level = len(heading.group(1))
                    if level <= section[0] or not section[1]:
                        section = (level, disowned(heading.group(2)))
                    end = heading.end()
                body = body[end:]  # the lead-in is what follows the last heading
            lead_in = _last_paragraph(body)
            continue
        if lead_in is not None:
            own = bool(lead_in) and _may_disown(lead_in) and disowned(_SENTENCE_END.split(" ".join(lead_in.split()))[-1])
        flags[index] = section[1] or own
        lead_in = None
    return flags


def recommended_parts(answer: str) -> tuple[Visible, list[FencePart], list[FencePart]]:
    """(the visible answer, its parts that count, the code blocks it disowns)."""
    visible = visible_answer(answer)
    parts = split_fences(visible.text)
    flags = disowned_blocks(parts)
    return visible, [p for p, f in zip(parts, flags) if not f], [p for p, f in zip(parts, flags) if f]
