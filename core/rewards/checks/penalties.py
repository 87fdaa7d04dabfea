"""Anti-hacking penalties: keyword stuffing, repetition, degenerate text, length and broken code, each
(points off the final reward, evidence); hard-coded secrets and dangerous advice are found in dangers.py.
"""

from __future__ import annotations

import re
from collections import Counter

from core.rewards.parse.text import Analysis

PENALTIES = ("keyword_stuffing", "repetition", "degenerate", "length", "broken_code", "hardcoded_secret", "dangerous_advice",
             "grader_note", "unrequested_artifacts")

SHORT_WORDS = 60  # below this an answer cannot explain a DevOps change
LONG_WORDS = 1500  # about 10 KB: beyond this the answer is padded (or the model rambles)
DENSE_SEGMENT = 0.6  # share of a sentence's tokens that are rubric phrases above which it is a keyword string
DENSE_SEGMENT_TERSE = 0.55  # the same for short sentences or ones with hardly any function words
DENSE_CODE = 0.5  # the same for a code block (real manifests and scripts stay under 0.35)
TEMPLATE_DENSITY = 0.25  # a sentence this keyword-heavy ...
TEMPLATE_REPEATS = 4  # ... whose function-word skeleton recurs this often is a template filled with keywords
NGRAM = 8
_WORD = re.compile(r"[a-z][a-z'\-]*")

def _clip(value: float, cap: float) -> float:
    return round(min(cap, max(0.0, value)), 4)


def mark_dense_segments(analysis: Analysis) -> list[str]:
    """Un-count prose segments that are strings of rubric keywords, or keyword-heavy sentences poured
    into one template ("We use X and Y for the Z." again and again); returns the evidence."""
    evidence = []
    prose = [s for s in analysis.segments if s.substantive and s.kind in ("sentence", "item") and len(s.skeleton) >= 2]
    shapes = Counter(s.skeleton for s in prose if s.tokens and s.covered / len(s.tokens) >= TEMPLATE_DENSITY)
    templated = 0
    for segment in prose:
        if shapes[segment.skeleton] >= TEMPLATE_REPEATS and segment.covered / max(1, len(segment.tokens)) >= TEMPLATE_DENSITY:
            segment.substantive, segment.reason = False, "keyword dense"
            templated += 1
    if templated:
        shape, times = shapes.most_common(1)[0]
        evidence.append(f"{templated} keyword sentences share a template ({times}x \"{' _ '.join(shape)}\")")
    for segment in analysis.segments:
        if (not segment.substantive or segment.kind == "inline_code"
                or len(segment.tokens) < (10 if segment.kind == "code" else 6)):
            continue
        density = segment.covered / len(segment.tokens)
        if segment.kind == "code":
            limit = DENSE_CODE
        else:
            limit = DENSE_SEGMENT if segment.stops >= 2 and len(segment.tokens) >= 10 else DENSE_SEGMENT_TERSE
        if density > limit:
            segment.substantive, segment.reason = False, "keyword dense"
            evidence.append(f"{density:.0%} of the words are rubric keywords: \"{segment.text[:70]}\"")
    return evidence


def keyword_stuffing(analysis: Analysis, dense_evidence: list[str], unsupported: list[str],
                     n_expected: int) -> tuple[float, list[str]]:
    """Bare buzzword lists, keyword-dense sentences, and expected outputs pasted without substance."""
    evidence = list(dense_evidence)
    total = sum(len(s.tokens) for s in analysis.segments) or 1
    stuffed = 0
    for segment in analysis.segments:
        if segment.substantive or segment.kind == "heading" or not segment.tokens:
            continue
        if segment.kind == "code" and segment.reason != "keyword dense":
            continue
        if segment.reason == "keyword dense" or (len(segment.hits) >= 2 and segment.covered / len(segment.tokens) >= 0.3):
            stuffed += len(segment.tokens)
            if segment.reason != "keyword dense" and len(evidence) < 6:
                evidence.append(f"bare buzzword list ({segment.reason}): \"{segment.text[:70]}\"")
    share = stuffed / total
    value = max(0.0, share - 0.08) * 1.2
    if unsupported:
        value += 0.25 * len(unsupported) / max(1, n_expected)
        evidence.append("expected outputs only in bare lists: " + ", ".join(unsupported))
    if share > 0.08:
        evidence.insert(0, f"{share:.0%} of the answer is keyword lists")
    return _clip(value, 0.6), evidence if value > 0 else []


def repetition(analysis: Analysis) -> tuple[float, list[str]]:
    """Repeated lines and repeated 8-word runs in the prose (the same paragraph pasted again), and code blocks
    pasted twice. Code repeats its own structure (one recording rule per window, one resource per zone), so
    inside a block nothing counts as repetition."""
    prose = [line.lower() for line in analysis.prose_lines]
    words = _WORD.findall(" ".join(prose))
    evidence = []
    ngram_dup = 0.0
    if len(words) >= 4 * NGRAM:
        distinct = len(set(zip(*(words[i:] for i in range(NGRAM)))))  # a set: only the count matters
        ngram_dup = 1.0 - distinct / (len(words) - NGRAM + 1)
    lines = [ln.strip() for ln in prose if len(ln.strip()) >= 25]
    blocks = [b.body.strip() for b in analysis.blocks if b.body.strip()]
    line_dup = block_dup = 0.0
    if lines:
        counts = Counter(lines)
        line_dup = sum(c - 1 for c in counts.values()) / len(lines)
        worst, times = counts.most_common(1)[0]
        if times > 1 and line_dup > 0.1:
            evidence.append(f"a line appears {times} times: \"{worst[:60]}\"")
    if len(blocks) > 1:
        copies = Counter(blocks)
        block_dup = sum(len(body) * (c - 1) for body, c in copies.items()) / sum(map(len, blocks))
        if block_dup:
            evidence.append(f"{sum(c - 1 for c in copies.values())} code block(s) pasted again")
    value = 1.2 * max(0.0, ngram_dup - 0.12) + 0.5 * max(0.0, line_dup - 0.12) + 1.2 * max(0.0, block_dup - 0.12)
    if ngram_dup > 0.12:
        evidence.insert(0, f"{ngram_dup:.0%} of 8-word runs are repeats")
    return _clip(value, 0.6), evidence if value > 0 else []


_ASCII_LETTERS = bytes(range(65, 91)) + bytes(range(97, 123))
_ODD_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffd\ue000-\uf8ff]")
_ODD_ASCII = bytes(range(0, 9)) + b"\x0b\x0c" + bytes(range(14, 32))  # _ODD_CHARS within ASCII


def degenerate(analysis: Analysis) -> tuple[float, list[str]]:
    """Garbage: few distinct characters or words, little alphabetic text, long unbroken strings."""
    visible = "".join(analysis.answer.split())
    if len(visible) < 40:
        return 0.0, []
    evidence = []
    value = 0.0
    distinct = len(set(visible.lower()))
    if distinct < 15:
        value += 0.4
        evidence.append(f"only {distinct} distinct characters")
    raw = visible.encode("utf-8")
    if len(raw) == len(visible):  # ASCII: count letters and control characters in C
        letters = len(raw) - len(raw.translate(None, _ASCII_LETTERS))
        odd = len(raw) - len(raw.translate(None, _ODD_ASCII))
    else:
        letters = sum(map(str.isalpha, visible))
        odd = len(_ODD_CHARS.findall(visible))
    if letters / len(visible) < 0.5:
        value += 0.3
        evidence.append(f"only {letters / len(visible):.0%} letters")
    words = analysis.words
    if len(words) >= 40 and len(set(words)) / len(words) < 0.2:
        value += 0.3
        evidence.append(f"only {len(set(words))} distinct words of {len(words)}")
    prose_words = " ".join(analysis.prose_lines).split()
    longest = max(map(len, prose_words), default=0)  # in C: most answers have no long string at all
    chunks = [w for w in prose_words if len(w) > 45 and "/" not in w] if longest > 45 else []
    if chunks and len(chunks) * 60 > len(prose_words):
        value += 0.3
        evidence.append(f"{len(chunks)} unbroken strings longer than 45 characters")
    if odd * 20 > len(visible):
        value += 0.3
        evidence.append(f"{odd} control or replacement characters")
    return _clip(value, 0.8), evidence


def length(analysis: Analysis) -> tuple[float, list[str]]:
    """Far too short to explain anything, or padded far beyond what the task needs."""
    n = len(analysis.words)
    if n == 0:
        return 0.0, []
    if n < SHORT_WORDS:
        return _clip(0.3 * (1 - n / SHORT_WORDS), 0.3), [f"{n} words (under {SHORT_WORDS})"]
    if n > LONG_WORDS:
        return _clip(0.1 * (n - LONG_WORDS) / 500, 0.4), [f"{n} words (over {LONG_WORDS})"]
    return 0.0, []


GRADER_NOTE = 0.25  # each line addressed to the grader or asking for marks (they are also taken out)


def grader_note(analysis: Analysis) -> tuple[float, list[str]]:
    """Lines addressed to a grader, reviewer or judge, or asking for marks: an answer argues with its user, not
    with whoever scores it."""
    return _clip(GRADER_NOTE * len(analysis.grader_notes), 0.5), list(analysis.grader_notes)


def broken_code(analysis: Analysis) -> tuple[float, list[str]]:
    """Code blocks that do not parse (0.12 each) or miss the basics a reviewer checks (0.03 each)."""
    evidence = []
    value = 0.0
    for block in analysis.blocks:
        for problem in block.problems:
            value += 0.12
            evidence.append(f"{block.kind} block at line {block.line}: {problem}")
        for issue in block.issues:
            value += 0.03
            evidence.append(f"{block.kind} block at line {block.line}: {issue}")
    return _clip(value, 0.4), evidence
