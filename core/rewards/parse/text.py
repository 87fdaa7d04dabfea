"""Turns an answer into scored segments: sentences of prose, list items, headings and code blocks, each
tokenised (case, separator and camelCase insensitive, lightly stemmed) and marked as substantive or not.

Signals only count inside substantive segments, so a bare list of buzzwords earns nothing.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

from core.rewards.parse.code_blocks import BlockReport, check_block
from core.rewards.parse.visible import recommended_parts

# One pass that splits camelCase and acronyms ("MaxRAMPercentage" -> Max RAM Percentage) and keeps
# letter-digit words together ("k8s", "p99", "5xx", "ec2").
_TOKEN = re.compile(r"\d*[A-Z]?[a-z]+(?:\d+[a-z]*)*|\d*[A-Z]+(?:\d+[a-z]*)*(?![a-z])|\d+")
_LOWER_WORD = re.compile(r"[a-z][a-z'\-]*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[^a-z\s])")
_LIST_MARK = re.compile(r"^(?:[-*+]|\d{1,3}[.)])\s+")
_LIST_STARTS = frozenset("-*+0123456789")
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
_HEADING = re.compile(r"^(?:#{1,6}\s+\S|\*\*[^*\n]{2,60}(?::\*\*|\*\*:?)(?:\s|$))")  # "## X" or a "**Label:**"
_BOLD_ONLY = re.compile(r"^\*\*[^*\n]{2,60}\*\*:?$")

# Function words: real prose has them, a comma list of buzzwords does not.
STOPWORDS = frozenset(
    "a an the and or but if then so that this these those to of for in on at by with from into over under "
    "is are be been being was were it its as not no only each every all any when while before after until "
    "than which who what why how we you they our your their there here can will would should must may might "
    "do does done use uses using per via also just both same one first last next instead rather because "
    "keep make get set let up out off".split()
)

# An inline command is recognised by its shape, not by a list of CLIs: a program-like first word (`nc`,
# `kafka-consumer-groups`, `./deploy.sh`) and arguments, and not an expression or a config line
# (`cl_waiting > 0`, `encrypt = true`, `sum by (cluster) (up)`) or prose in backticks.
_PROGRAM = re.compile(r"^(?:\.{0,2}/)?[a-z][a-z0-9._+-]*(?:/[a-z0-9._+-]+)*$")
_SHAPED_ARGUMENT = re.compile(r"^-|[/=.:@$*~{}<>|&;'\"\d]")
_EXPRESSION_WORDS = frozenset({"=", "==", "!=", "<=", ">=", "=~", "!~", ":="})
_EXPRESSION_START = frozenset({">", "<", "-", "+", "*", "/", "%", "by", "without", "unless", "and", "or"})
_SUBSHELL = re.compile(r"(?<![$<])\(")
_QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'")

_IRREGULAR = {"was": "was", "has": "has", "is": "is", "does": "do", "this": "this", "its": "its", "us": "us"}


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A light stemmer: plural, -ing, -ed and a final -e, so "probes", "probing", "probe" meet."""
    if len(word) <= 3 or word in _IRREGULAR or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("ing") and len(word) > 5:
        word = word[:-3]
    elif word.endswith("ed") and len(word) > 4:
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
        word = word[:-1]
    if word.endswith("e") and len(word) > 4:
        word = word[:-1]
    return word


@lru_cache(maxsize=8192)
def looks_like_command(span: str) -> bool:
    """Is this backticked span a shell command (`nc -z db 5432`, `terraform plan`, `jcmd 1 GC.heap_info`)?"""
    words = span.strip().removeprefix("$ ").split()
    if len(words) < 2 or len(span) > 200 or not _PROGRAM.match(words[0]):
        return False
    arguments = words[1:]
    if arguments[0] in _EXPRESSION_START or any(w in _EXPRESSION_WORDS for w in arguments):
        return False
    prose = sum(w in STOPWORDS for w in arguments)
    if prose >= 2 and 2 * prose >= len(arguments):
        return False  # "pods are replaced and ..." in backticks
    if words[0] in STOPWORDS and not any(map(_SHAPED_ARGUMENT.search, arguments)):
        return False  # `use the cache`, `make sense`
    if _SUBSHELL.search(_QUOTED.sub("", span)):  # parentheses: only real shell syntax (`test (3.10)` is not)
        import bashlex

        try:
            bashlex.parse(span)
        except Exception:  # bashlex raises its own errors and others on odd input
            return False
    return True


_ALNUM = re.compile(r"[A-Za-z0-9]+")


class _Normalised(dict):
    """raw word -> its normalised tokens joined by spaces ("readinessProbe" -> "readiness prob"), filled on
    first use so `tokens` runs as C-level map/join/split."""

    def __missing__(self, raw: str) -> str:
        if len(self) > 200_000:  # bounded memory on a long training run
            self.clear()
        value = " ".join(stem(t.lower()) for t in _TOKEN.findall(raw))
        self[raw] = value
        return value


_NORMALISED = _Normalised()


def tokens(text: str) -> list[str]:
    """Normalised tokens: camelCase and separators split, lowercased, stemmed (cached per raw word)."""
    return " ".join(map(_NORMALISED.__getitem__, _ALNUM.findall(text))).split()


def phrase_key(text: str) -> tuple[str, ...]:
    """The token tuple a phrase (a signal or an expected output) is matched by."""
    return tuple(tokens(text))


@dataclass(slots=True)
class Segment:
    """One unit of the answer: a sentence, list item, heading or code block."""

    kind: str  # "sentence" | "item" | "heading" | "table" | "code" | "inline_code"
    text: str
    tokens: list[str]
    substantive: bool
    reason: str = ""  # why it does not count ("bare list", "too short", "terse template", ...); "terse": it counts
    block: BlockReport | None = None
    supported: bool = False  # a heading with real content under it (counts for expected outputs)
    section: bool = False  # a heading over real content, not one stock line (rubric checks see it)
    hits: list[tuple[str, str]] = field(default_factory=list)  # (dimension, signal) rubric matches
    covered: int = 0  # tokens covered by rubric matches
    stops: int = 0  # function words (prose has them; keyword strings do not)
    skeleton: tuple[str, ...] = ()  # the function words in order ("we use and for the")
    joined: str | None = None  # " ".join(tokens) with spaces around, built on first use


@dataclass
class Analysis:
    """Everything the dimensions and penalties read, computed once per answer."""

    answer: str
    segments: list[Segment] = field(default_factory=list)
    blocks: list[BlockReport] = field(default_factory=list)
    prose_lines: list[str] = field(default_factory=list)
    headings: int = 0
    words: list[str] = field(default_factory=list)  # raw lowercase words of the whole answer
    hidden: list[str] = field(default_factory=list)  # invisible content taken out (HTML comments, ...)
    grader_notes: list[str] = field(default_factory=list)  # lines addressed to the grader, taken out
    disowned: list[str] = field(default_factory=list)  # code blocks the answer says not to use, not counted

    @property
    def counted(self) -> list[Segment]:
        return [s for s in self.segments if s.substantive]


# A terse fact: "Rollback: `git revert`.", "Scanners: `trivy`, `grype` and `syft`." (a label and one to three
# short items), or three or four words with a function word that is not a conjunction ("Page on burn rate.").
_LABEL = re.compile(r"^\**([A-Za-z][\w /()-]{0,30}?)\**:\**\s+(\S.*)$")
_ITEMS = re.compile(r",|;|\s(?:and|or)\s")
_CONJUNCTIONS = frozenset({"and", "or", "but", "both"})
MAX_LABELLED_ITEMS = 3
TERSE_TEMPLATE = 3  # this many terse facts of one shape ("Use X.", "Tooling: X.") are a keyword list in disguise


def _terse_shape(text: str, words: list[str], skeleton: tuple[str, ...]) -> tuple[str, ...] | None:
    """The shape of a terse fact (its label, or its first word: "Use X.", "Use Y." share one), or None when
    the text is not one."""
    label = _LABEL.match(text.strip())
    if label:
        items = [item for item in _ITEMS.split(label.group(2).strip().rstrip(".")) if item.strip()]
        ok = 1 <= len(items) <= MAX_LABELLED_ITEMS and all(len(item.split()) <= 3 for item in items)
        return (label.group(1).strip().lower() + ":",) if ok else None
    return (words[0],) if len(words) >= 3 and any(word not in _CONJUNCTIONS for word in skeleton) else None


def _prose_judgement(text: str, kind: str, whole: bool = True) -> tuple[str, tuple[str, ...]]:
    """Why this sentence is not real prose ("" when it is: enough words, not a comma list of terms; or a
    terse fact, "terse", when it is `whole`, not a piece of a hard-wrapped paragraph), and its function
    words in order: the sentence's skeleton, which templated keyword sentences share (a terse fact's is
    its shape, see `_terse_shape`)."""
    words = _LOWER_WORD.findall(text.lower())
    n = len(words)
    skeleton = tuple(filter(STOPWORDS.__contains__, words))
    stops = len(skeleton)
    if n < (4 if kind == "table" else 5):
        shape = _terse_shape(text, words, skeleton) if kind != "table" and whole else None
        return ("terse", shape) if shape is not None else ("too short", skeleton)
    commas = text.count(",") + text.count(";") + text.count("|")
    if commas >= 2 and n / (commas + 1) <= 3.0 and stops / n < 0.25:
        shape = _terse_shape(text, [], ()) if whole else None
        return ("terse", shape) if shape is not None else ("bare list", skeleton)
    if commas >= LIST_ITEMS - 1 and _comma_list(text):
        return "comma list", skeleton
    if stops == 0 and "`" not in text and ":" not in text:
        return "no prose words", skeleton
    return "", skeleton


_LIST_SPLIT = re.compile(r",|\s(?:and|or)\s")
_DIGIT = re.compile(r"\d")
_ASIDES = re.compile(r"\([^()]*\)|`[^`]*`")  # an enumeration in parentheses or code is a detail of a statement
LIST_ITEMS = 6  # a sentence with this many short comma-separated items after its lead-in ...
LIST_SHARE = 2 / 3  # ... that are this share of those items is a list of terms, not a statement
SHORT_ITEM = 4  # words


def _comma_list(text: str) -> bool:
    """Is the sentence, after its lead-in, mostly a comma list of short items ("teams end up discussing topics
    such as error budget policy, deployment gate, burn rate, canary analysis, ...")? Such a list names terms
    and says nothing of any of them; a list of instructions ("add a readiness probe on /ready, ...") is longer
    per item, and an enumeration in parentheses or backticks details a statement."""
    items = [item for item in _LIST_SPLIT.split(_ASIDES.sub("", text))[1:] if _LOWER_WORD.search(item.lower())]
    # an item with a figure is a specific value ("heap 1.2 GiB"), not a term
    short = sum(len(_LOWER_WORD.findall(item.lower())) <= SHORT_ITEM and not _DIGIT.search(item) for item in items)
    return short >= LIST_ITEMS and short >= LIST_SHARE * len(items)


def _wraps(line: str) -> bool:
    """Does this prose line run on into the next one (a hard-wrapped paragraph)?"""
    return bool(line) and line[-1] not in ".!?:" and not _starts_block(line)


def _starts_block(line: str) -> bool:
    return line[0] in "#|" or (line[0] in _LIST_STARTS and _LIST_MARK.match(line) is not None)


def _add_prose(analysis: Analysis, text: str) -> None:
    segments = analysis.segments
    lines = [raw.strip() for raw in text.splitlines()]
    for at, line in enumerate(lines):
        if not line:
            continue
        # a piece of a hard-wrapped paragraph is no terse fact ("takes the service down.")
        continues = at > 0 and _wraps(lines[at - 1]) and not _starts_block(line)
        runs_on = _wraps(line) and at + 1 < len(lines) and bool(lines[at + 1]) and not _starts_block(lines[at + 1])
        analysis.prose_lines.append(line)
        first = line[0]
        if first in "#*" and _HEADING.match(line):
            analysis.headings += 1
            if first == "#" or _BOLD_ONLY.match(line):
                segments.append(Segment("heading", line, tokens(line), False, "heading"))
                continue
        kind = "sentence"
        if first in _LIST_STARTS and _LIST_MARK.match(line):
            kind, line = "item", _LIST_MARK.sub("", line, count=1)
        elif first == "|":
            if set(line) <= set("|-: "):
                continue
            kind = "table"
        if "`" in line:
            for span in _INLINE_CODE.findall(line):
                if looks_like_command(span):
                    segments.append(Segment("inline_code", span, tokens(span), True))
        split = kind != "table" and ("." in line or "!" in line or "?" in line)
        sentences = _SENTENCE_END.split(line) if split else [line]
        for index, sentence in enumerate(sentences):
            whole = not (index == 0 and continues) and not (index == len(sentences) - 1 and runs_on)
            reason, skeleton = _prose_judgement(sentence, kind, whole)
            segments.append(Segment(kind, sentence, tokens(sentence), reason in ("", "terse"), reason,
                                    stops=len(skeleton), skeleton=skeleton))


_COMMENT_PREFIXES = {"yaml": ("#",), "shell": ("#",), "console": ("#",), "dockerfile": ("#",), "python": ("#",),
                     "sql": ("--",), "hcl": ("#", "//"), "other": ("#", "//", "-- ")}


def _split_comments(body: str, kind: str) -> tuple[str, str]:
    """(code without whole-line comments, the comments' text)."""
    prefixes = _COMMENT_PREFIXES.get(kind)
    if not prefixes or not any(p in body for p in prefixes):
        return body, ""
    code, comments = [], []
    for line in body.splitlines():
        stripped = line.lstrip()
        if stripped.startswith(prefixes) and not stripped.startswith("#!"):
            comments.append(stripped.lstrip("#/- ").strip())
        else:
            code.append(line)
    return "\n".join(code), "\n".join(comments)


def analyse(answer: str) -> Analysis:
    """Split what the answer recommends (parse/visible.py: no hidden text, no notes to the grader, no code block
    it disowns) into segments and check its code blocks."""
    visible, parts, disowned = recommended_parts(answer)
    answer = visible.text
    analysis = Analysis(answer=answer, words=_LOWER_WORD.findall(answer.lower()), hidden=visible.hidden,
                        grader_notes=visible.grader_notes,
                        disowned=[f"{p.lang or 'code'} block at line {p.line}" for p in disowned])
    for part in parts:
        if part.lang is None:
            _add_prose(analysis, part.body)
            continue
        report = check_block(part)
        analysis.blocks.append(report)
        if report.kind == "text":
            _add_prose(analysis, part.body)
            continue
        reason = "" if report.valid else "broken code"
        code, comments = _split_comments(part.body, report.kind)
        analysis.segments.append(Segment("code", code, tokens(code), report.valid, reason, report))
        if comments:  # comments are prose: they count only as real sentences, like the text around
            _add_prose(analysis, comments)
    shapes = Counter(s.skeleton for s in analysis.segments if s.reason == "terse")
    for segment in analysis.segments:
        if segment.reason == "terse" and shapes[segment.skeleton] >= TERSE_TEMPLATE:
            segment.substantive, segment.reason = False, "terse template"
    following = None
    # A heading heads a section when what is under it is real: two or more segments, one substantive, or one
    # substantive segment that is not a stock line repeated under other headings ("handled following best practices").
    repeated = Counter(s.text for s in analysis.segments if s.kind != "heading")
    under, real = 0, False  # segments under the heading being read (bottom-up), and whether one is substantive
    for segment in reversed(analysis.segments):
        if segment.kind == "heading":
            segment.supported = following is not None and following.substantive
            segment.section = real and (under >= 2 or repeated[following.text] == 1)
            under, real = 0, False
        else:
            under, real = under + 1, real or segment.substantive
        following = segment
    return analysis
