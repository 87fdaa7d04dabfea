"""Compact braille line charts of run metrics: raw values faint under a bold smoothed line, x = step.

A `Chart` only draws what `set_series` last gave it, bucketed to its width, within the step range, smoothing and
scale the screen set (`view`); `MetricChart` shows one, `ChartPanel` a grid of them as one widget. The screen
decides when (about once a second, only while visible, only on change).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widget import Widget

from core.formatting import format_number
from devops_tui.series import Series, smooth

# Braille dot bits for (column 0..1, row 0..3) inside one character cell.
_DOTS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
LABEL_WIDTH = 7
SMOOTHING_STEPS = (0.0, 0.6, 0.8, 0.9, 0.95, 0.99)
ZOOM_STEPS = (1.0, 0.5, 0.25, 0.1)  # share of the run's steps shown, the latest ones


@dataclass(frozen=True)
class ChartView:
    """How every chart on a screen draws: smoothing weight (0 = off), log scale, share of the latest steps."""

    smoothing: float = 0.8
    log_scale: bool = False
    zoom: float = 1.0

    def describe(self) -> str:
        parts = [f"smoothing {self.smoothing:g}" if self.smoothing else "smoothing off"]
        parts.append("log scale" if self.log_scale else "linear")
        parts.append("all steps" if self.zoom >= 1 else f"last {self.zoom:.0%} of steps")
        return ", ".join(parts)


def bucket_by_step(steps: Sequence[float], values: Sequence[float], width: int,
                   lo: float, hi: float) -> list[float]:
    """Mean value per column over the step range [lo, hi]; NaN where a column has no point."""
    sums = [0.0] * width
    counts = [0] * width
    span = (hi - lo) or 1.0
    for step, value in zip(steps, values):
        if not math.isfinite(value) or step < lo or step > hi:
            continue
        col = int((step - lo) / span * (width - 1) + 0.5) if width > 1 else 0
        col = min(max(col, 0), width - 1)
        sums[col] += value
        counts[col] += 1
    return [s / c if c else math.nan for s, c in zip(sums, counts)]


def _fill_gaps(values: list[float]) -> list[float]:
    """Join the points with straight lines across empty columns (none before the first or after the last)."""
    known = [i for i, v in enumerate(values) if math.isfinite(v)]
    out = list(values)
    for left, right in zip(known, known[1:]):
        a, b = values[left], values[right]
        for i in range(left + 1, right):
            out[i] = a + (b - a) * (i - left) / (right - left)
    return out


def axis_label(value: float, span: float | None = None) -> str:
    """A y-axis label of at most six characters, precise enough to tell the top from the bottom."""
    text = format_number(value, style="compact")
    if span and 0 < span < 1 and 1e-3 <= abs(value) < 1e4:
        wanted = min(max(3, 1 - math.floor(math.log10(span))), 6)
        text = next((t for d in range(wanted, -1, -1) if len(t := f"{value:.{d}f}") <= LABEL_WIDTH - 1), text)
    if len(text) > LABEL_WIDTH - 1:
        text = f"{value:.0e}".replace("e-0", "e-").replace("e+0", "e")
    return text[: LABEL_WIDTH - 1]


def value_range(values: Sequence[float]) -> tuple[float, float]:
    """The y range of the drawn values; a flat series gets a small band around its value, not +-0.5."""
    finite = [v for v in values if math.isfinite(v)] or [0.0]
    lo, hi = min(finite), max(finite)
    if hi - lo < 1e-12:
        pad = max(abs(lo) * 0.05, 1e-3)
        lo, hi = lo - pad, hi + pad
    return lo, hi


WAITING = "waiting for data"


class Chart:
    """One line chart of one or more metrics (no widget): the first line gets a smoothed bold line over its faint
    raw values. A `MetricChart` shows one; a `ChartPanel` draws a whole grid of them as a single widget."""

    def __init__(self, title: str, keys: Sequence[str], *, labels: Sequence[str] | None = None, unit: str = "",
                 smoothed: bool = True, smooth_each: bool = False) -> None:
        self.title = title
        self.unit = unit
        self.keys = list(keys)
        self.labels = list(labels) if labels else [k.split("/")[-2] if k.endswith("/mean") else k.split("/")[-1]
                                                  for k in self.keys]
        self.smoothed = smoothed
        self.smooth_each = smooth_each  # overlaid runs: every line smoothed, no raw layer under them
        self._named = False
        self.view = ChartView()
        self._series: list[Series | None] = [None] * len(self.keys)
        self._generation = 0
        self._cache: tuple[tuple, list[Strip]] | None = None
        self.waiting = WAITING  # what an empty chart says (the Live screen: the warm-start's progress)
        self.draws = 0  # how many times the chart was actually rebuilt (tests check it stays idle)

    def set_series(self, series: dict[str, Series], keys: Sequence[str] | None = None,
                   labels: Sequence[str] | None = None, view: ChartView | None = None) -> None:
        """Point the chart at new data (and optionally new keys and view) and schedule one redraw."""
        if keys is not None:
            self.keys = list(keys)
            self.labels = list(labels) if labels else list(self.keys)
            self._named = True  # lines chosen by the screen (penalties, memory): a lone line says its name
        if view is not None:
            self.view = view
        self._series = [series.get(k) for k in self.keys]
        self._generation += 1

    # -- drawing ---------------------------------------------------------------------------------
    def lines(self, width: int, height: int, styles: dict[str, Style], base: Style, theme: str) -> list[Strip]:
        """The chart as `height` lines of `width` cells, rebuilt only when the size, data or theme changed."""
        key = (width, height, self._generation, theme)
        cached = self._cache
        if cached is not None and cached[0] == key:
            return cached[1]
        self.draws += 1
        lines = self._build(width, height, styles, base)
        lines += [Strip.blank(width, base)] * (height - len(lines))
        self._cache = (key, lines)
        return lines

    def _legend(self, styles: dict[str, Style], base: Style) -> list[tuple[str, Style]]:
        """(text, style) pieces after the title: the latest value (and smoothed value) or one entry per line."""
        present = [(label, s, idx) for idx, (label, s) in enumerate(zip(self.labels, self._series))
                   if s is not None and s.last_value is not None]
        if len(self.keys) == 1:
            if not present:
                return []
            label, series, _ = present[0]
            pieces = [((f"{label} " if self._named else "") + format_number(series.last_value, style="compact"),
                       base + styles["chart--line-1"])]
            if self.smoothed and self.view.smoothing and len(series) > 1:
                sm = smooth(series.values, self.view.smoothing)
                pieces.append((f" ~{format_number(sm[-1], style='compact')}", base + styles["chart--axis"]))
            return pieces
        return [(f"{label} {format_number(series.last_value, style='compact')}",
                 base + styles[f"chart--line-{min(idx + 1, 4)}"]) for label, series, idx in present]

    def _head(self, width: int, styles: dict[str, Style], base: Style) -> list[Strip]:
        """The title line, and a legend line under it when the legend does not fit beside the title."""
        title = f" {self.title}" + (f" ({self.unit})" if self.unit else "") + " "
        legend = self._legend(styles, base)
        inline = sum(len(text) + 1 for text, _ in legend)
        head = [Segment(title, base + styles["chart--title"])]
        if len(title) + inline <= width or not legend:
            for text, style in legend:
                head += [Segment(text, style), Segment(" ", base)]
            return [Strip(head).adjust_cell_length(width, base)]
        # Too long for one line: entries on the next line, each cut to an equal share of the width.
        share = max(4, width // len(legend) - 1)
        second = []
        for text, style in legend:
            if len(text) > share:  # the label gives way, never the value
                label, _, value = text.rpartition(" ")
                room = max(share - len(value) - 2, 0)
                # A run name cut from the left (`…ci-fast-5e1f`) keeps its end, the part that tells runs apart.
                label = "…" + label[len(label) - room:] if label.startswith("…") else label[:room] + "…"
                text = f"{label} {value}"[-share:]
            second += [Segment(text, style), Segment(" ", base)]
        return [Strip(head).adjust_cell_length(width, base), Strip(second).adjust_cell_length(width, base)]

    def _build(self, width: int, height: int, styles: dict[str, Style], base: Style) -> list[Strip]:
        if width <= 0 or height <= 0:
            return []
        out = self._head(width, styles, base)[: max(height - 3, 1)]
        rows = height - len(out) - 1
        plot_w = width - LABEL_WIDTH
        present = [s for s in self._series if s is not None and len(s)]
        if rows < 1 or plot_w < 4 or not present:
            msg = self.waiting if rows >= 1 else ""
            for r in range(height - len(out)):
                text = msg if r == max(rows // 2, 0) else ""
                out.append(Strip([Segment(text.center(width)[:width], base + styles["chart--axis"])], width))
            return out[:height]
        view = self.view
        first = min(s.steps[0] for s in present)
        hi = max(s.steps[-1] for s in present)
        lo = max(first, hi - (hi - first) * view.zoom) if view.zoom < 1 else first
        dots_w, dots_h = plot_w * 2, rows * 4
        scale = (lambda v: math.log10(v) if v > 0 else math.nan) if view.log_scale else (lambda v: v)
        lines_to_draw: list[tuple[list[float], str]] = []
        for idx, series in enumerate(self._series):
            if series is None or not len(series):
                continue
            raw = _fill_gaps([scale(v) for v in bucket_by_step(series.steps, series.values, dots_w, lo, hi)])
            if idx == 0 and self.smoothed and view.smoothing and len(series) > 2:
                lines_to_draw.append((raw, "chart--raw"))
                lines_to_draw.append((smooth(raw, view.smoothing), "chart--line-1"))
            elif self.smooth_each and view.smoothing and len(series) > 2:
                lines_to_draw.append((smooth(raw, view.smoothing), f"chart--line-{min(idx + 1, 4)}"))
            else:
                lines_to_draw.append((raw, f"chart--line-{min(idx + 1, 4)}"))
        vmin, vmax = value_range([v for values, _ in lines_to_draw for v in values])
        # One grid of braille bits and an owner (style) per cell; later lines win the cell's colour.
        bits = [[0] * plot_w for _ in range(rows)]
        owner = [[""] * plot_w for _ in range(rows)]
        for values, style_name in lines_to_draw:
            prev_y = None
            for x, value in enumerate(values):
                if not math.isfinite(value):
                    prev_y = None
                    continue
                y = int(round((vmax - value) / (vmax - vmin) * (dots_h - 1)))
                ys = range(min(prev_y, y), max(prev_y, y) + 1) if prev_y is not None else (y,)
                for yy in ys:  # join neighbouring points with a vertical run of dots
                    cx, cy = x // 2, yy // 4
                    bits[cy][cx] |= _DOTS[x % 2][yy % 4]
                    owner[cy][cx] = style_name
                prev_y = y
        axis = base + styles["chart--axis"]
        shown = (lambda v: 10**v) if view.log_scale else (lambda v: v)
        for r in range(rows):
            if r == 0:
                label = axis_label(shown(vmax), None if view.log_scale else vmax - vmin)
            elif r == rows - 1:
                label = axis_label(shown(vmin), None if view.log_scale else vmax - vmin)
            else:
                label = ""
            segments = [Segment(label.rjust(LABEL_WIDTH - 1)[: LABEL_WIDTH - 1] + "│", axis)]
            run_style, run_text = None, []
            for c in range(plot_w):
                ch = chr(0x2800 + bits[r][c]) if bits[r][c] else " "
                # A blank cell looks the same in any style: it joins the current run (fewer segments to render).
                style_name = owner[r][c] or run_style or "chart--axis"
                if style_name != run_style and run_text:
                    segments.append(Segment("".join(run_text), base + styles[run_style]))
                    run_text = []
                run_style = style_name
                run_text.append(ch)
            if run_text:
                segments.append(Segment("".join(run_text), base + styles[run_style]))
            out.append(Strip(segments, width))
        left, right = f"step {int(lo)}", f"{int(hi)}" + (" log" if view.log_scale else "")
        gap = max(plot_w - len(left) - len(right), 1)
        footer = " " * LABEL_WIDTH + left + " " * gap + right
        out.append(Strip([Segment(footer[:width].ljust(width), axis)], width))
        return out[:height]


COMPONENT_CLASSES = {"chart--title", "chart--axis", "chart--raw", "chart--line-1", "chart--line-2", "chart--line-3",
                     "chart--line-4"}  # few on purpose: every one costs a style pass at start-up


class _ChartStyles:
    """The component-class styles both chart widgets draw with (each lists COMPONENT_CLASSES itself: Textual
    collects them from widget classes only)."""

    def _styles(self) -> dict[str, Style]:
        return {name: self.get_component_rich_style(name, partial=True) for name in COMPONENT_CLASSES}


class MetricChart(_ChartStyles, Widget):
    """A widget showing one `Chart` (the Compare screen's overlay)."""

    COMPONENT_CLASSES = COMPONENT_CLASSES

    def __init__(self, title: str, keys: Sequence[str], *, id: str | None = None, **options) -> None:
        super().__init__(id=id)
        self.chart = Chart(title, keys, **options)

    @property
    def title(self) -> str:
        return self.chart.title

    @title.setter
    def title(self, value: str) -> None:
        self.chart.title = value

    def set_series(self, series: dict[str, Series], keys: Sequence[str] | None = None,
                   labels: Sequence[str] | None = None, view: ChartView | None = None) -> None:
        self.chart.set_series(series, keys, labels, view)
        self.refresh()

    def render_line(self, y: int) -> Strip:
        lines = self.chart.lines(self.size.width, self.size.height, self._styles(), self.rich_style, self.app.theme)
        return lines[y] if y < len(lines) else Strip.blank(self.size.width)


class ChartPanel(_ChartStyles, Widget):
    """A grid of charts (two per row) drawn as one widget: a tab of ten charts costs the compositor one region
    instead of a dozen, which keeps tab switches quick. Each chart is at least `MIN_HEIGHT` lines; on a short
    terminal the panel grows taller than its container, which scrolls."""

    COMPONENT_CLASSES = COMPONENT_CLASSES
    MIN_HEIGHT = 6
    COLUMNS = 2

    def __init__(self, charts: list[Chart], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.charts = charts
        self._cache: tuple[tuple, list[Strip]] | None = None

    @property
    def rows(self) -> int:
        return max(1, -(-len(self.charts) // self.COLUMNS))

    def get_content_height(self, container, viewport, width: int) -> int:
        return self.rows * max(self.MIN_HEIGHT, container.height // self.rows)

    def set_series(self, series: dict[str, Series], keys_for=None, view: ChartView | None = None,
                   waiting: str = WAITING) -> None:
        """New data for every chart; `keys_for(chart)` gives (keys, labels) for charts whose lines are chosen
        by the screen, or (None, None); `waiting` is what the charts without data say."""
        for chart in self.charts:
            chart.waiting = waiting
            keys, labels = keys_for(chart) if keys_for is not None else (None, None)
            chart.set_series(series, keys, labels, view)
        self.refresh()

    def render_line(self, y: int) -> Strip:
        width, height = self.size
        key = (self.size, tuple(c._generation for c in self.charts), self.app.theme)
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, self._join(width, height))
        lines = self._cache[1]
        return lines[y] if y < len(lines) else Strip.blank(width)

    def _join(self, width: int, height: int) -> list[Strip]:
        """Every screen line of the grid: the charts of a row side by side with a one-cell gap."""
        styles, base, theme = self._styles(), self.rich_style, self.app.theme
        chart_h = max(1, height // self.rows)
        left_w = (width - 1) // 2
        right_w = width - 1 - left_w
        gap = Strip.blank(1, base)
        out: list[Strip] = []
        for row in range(self.rows):
            pair = self.charts[row * self.COLUMNS:(row + 1) * self.COLUMNS]
            left = pair[0].lines(left_w, chart_h, styles, base, theme)
            right = pair[1].lines(right_w, chart_h, styles, base, theme) if len(pair) > 1 else \
                [Strip.blank(right_w, base)] * chart_h
            out += [Strip.join([a, gap, b]) for a, b in zip(left, right)]
        return out + [Strip.blank(width, base)] * (height - len(out))
