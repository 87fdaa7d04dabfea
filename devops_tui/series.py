"""One metric's history in bounded memory, and the smoothing the charts draw over it.

No Textual here: the run state fills `Series`, the chart widget reads them.
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
