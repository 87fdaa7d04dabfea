"""Numbers and durations as short text, the same way in the CLI tables, the reports and the cockpit.

One function each; where faces want a different look on purpose (width, sign, a clock), it is a parameter.
"""

from __future__ import annotations

import math
from typing import Any

DURATION_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def format_number(value: Any, *, style: str = "sig", digits: int = 4, signed: bool = False,
                  grouped: bool = False, missing: str = "-") -> str:
    """A metric or a count as a table cell; `missing` for None, `str(value)` for what is not a number.

    style "sig": `digits` significant digits (a table cell: '0.6123', '1.235e+04'); integers stay whole;
      `grouped` writes 1,000 and more as whole numbers with thousands separators ('12,345').
    style "fixed": `digits` decimals ('0.612'), for columns of comparable numbers.
    style "compact": at most about 8 characters, precise where it matters ('0.612', '12.3', '1234',
      '1.00e-04'), for chart labels and narrow cells.
    `signed` puts a '+' before positive numbers (differences).
    """
    if value is None:
        return missing
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if style == "sig" and isinstance(value, int):
        text = str(value)
    elif not math.isfinite(value):
        text = str(float(value))
    elif style == "sig":
        text = f"{value:,.0f}" if grouped and abs(value) >= 1000 else f"{value:.{digits}g}"
    elif style == "fixed":
        text = f"{value:.{digits}f}"
    elif style == "compact":
        text = _compact(float(value))
    else:
        raise ValueError(f"style must be 'sig', 'fixed' or 'compact', not {style!r}")
    return f"+{text}" if signed and value > 0 else text


def _compact(value: float) -> str:
    magnitude = abs(value)
    if magnitude == 0:
        return "0"
    if magnitude >= 1e5 or magnitude < 1e-3:
        return f"{value:.2e}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.3f}"


def format_duration(seconds: float | None, *, parts: int = 1, clock: bool = False, missing: str = "-") -> str:
    """A duration, rounded down, negative ones as 0; `missing` for None, NaN or inf.

    parts=1: the largest unit only ('3d', '2h', '5m', '7s': ages); parts=2: two units, the second
    zero-padded ('1h02m', '3m05s', '0m07s': an ETA); clock: 'H:MM:SS' with unbounded hours (log lines).
    """
    if seconds is None or not math.isfinite(seconds):
        return missing
    whole = int(max(seconds, 0))
    if clock:
        return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"
    parts = min(max(parts, 1), len(DURATION_UNITS))
    first = next(i for i, (_, size) in enumerate(DURATION_UNITS) if whole >= size or size == 1)
    first = min(first, len(DURATION_UNITS) - parts)  # '0m07s', not '7s', when two parts are asked for
    text, rest = "", whole
    for i, (unit, size) in enumerate(DURATION_UNITS[first:first + parts]):
        amount, rest = divmod(rest, size)
        text += f"{amount}{unit}" if i == 0 else f"{amount:02d}{unit}"
    return text
