"""One metric's history in bounded memory, its exact figures (`KeyStats`), and the smoothing the charts draw.

No Textual here: the run state fills `Series` and `KeyStats`, the chart widget and the metrics table read them.
"""

from __future__ import annotations

import math

SERIES_CAPACITY = 2048  # points kept per metric; older history is thinned, never dropped entirely


class Series:
    """One metric's history in bounded memory: every point until full, then every 2nd, 4th, ..."""

    __slots__ = ("capacity", "steps", "values", "stride", "_seen", "last_step", "last_value")

    def __init__(self, capacity: int = SERIES_CAPACITY) -> None:
        self.capacity = capacity
        self.steps: list[float] = []
        self.values: list[float] = []
        self.stride = 1
        self._seen = 0
        self.last_step: float | None = None
        self.last_value: float | None = None

    def append(self, step: float, value: float) -> None:
        self.last_step, self.last_value = step, value
        keep = self._seen % self.stride == 0
        self._seen += 1
        if not keep:
            return
        self.steps.append(step)
        self.values.append(value)
        if len(self.values) >= self.capacity:
            self.steps = self.steps[::2]
            self.values = self.values[::2]
            self.stride *= 2
            self._seen = 1

    def finite_values(self) -> list[float]:
        return [v for v in self.values if math.isfinite(v)]

    def __len__(self) -> int:
        return len(self.values)


def smooth(values: list[float], weight: float = 0.8) -> list[float]:
    """TensorBoard's debiased exponential moving average (NaN points are skipped, not propagated)."""
    out, last, count = [], 0.0, 0
    for value in values:
        if not math.isfinite(value):
            out.append(math.nan)
            continue
        count += 1
        last = last * weight + (1 - weight) * value
        out.append(last / (1 - weight**count))
    return out


class KeyStats:
    """Exact figures of one metric over every row seen (the series may be thinned; these never are)."""

    __slots__ = ("count", "non_finite", "min", "max", "total", "last_step", "last_value", "first_bad_step")

    def __init__(self) -> None:
        self.count = 0
        self.non_finite = 0
        self.min = math.inf
        self.max = -math.inf
        self.total = 0.0
        self.last_step: int | None = None
        self.last_value: float | None = None
        self.first_bad_step: int | None = None

    def add(self, step: int, value: float) -> None:
        self.count += 1
        if self.last_step is None or step >= self.last_step:
            self.last_step, self.last_value = step, value
        if not math.isfinite(value):
            self.non_finite += 1
            if self.first_bad_step is None or step < self.first_bad_step:
                self.first_bad_step = step
            return
        self.min = min(self.min, value)
        self.max = max(self.max, value)
        self.total += value

    def merged(self, other: KeyStats) -> KeyStats:
        """These figures and `other`'s together (`other` holds the later rows)."""
        out = KeyStats()
        out.count = self.count + other.count
        out.non_finite = self.non_finite + other.non_finite
        out.min, out.max = min(self.min, other.min), max(self.max, other.max)
        out.total = self.total + other.total
        latest = other if other.last_step is not None else self
        out.last_step, out.last_value = latest.last_step, latest.last_value
        bad = [s for s in (self.first_bad_step, other.first_bad_step) if s is not None]
        out.first_bad_step = min(bad) if bad else None
        return out

    @property
    def mean(self) -> float | None:
        finite = self.count - self.non_finite
        return self.total / finite if finite else None


def number_or_nan(value) -> float | None:
    """A metric value as a float: numbers as they are, null (how NaN/inf is stored) as NaN, anything else None."""
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)
