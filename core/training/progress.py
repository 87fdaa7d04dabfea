"""What `devops-rl train` shows while it runs and when it ends: a live panel on a terminal, plain lines otherwise.

`ConsoleProgress` is the `progress` callback of `run_training`; `run_summary` is the closing note.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from core.formatting import format_duration

KEY_FIGURES = (
    ("reward", "critic/score/mean", "{:.3f}"),
    ("pg_loss", "actor/pg_loss", "{:+.4f}"),
    ("kl", "actor/ppo_kl", "{:+.4f}"),
    ("entropy", "actor/entropy", "{:.3f}"),
    ("resp_len", "response_length/mean", "{:.0f}"),
    ("tok/s", "perf/throughput", "{:.0f}"),
    ("mem_gb", "actor/perf/max_memory_allocated_gb", "{:.2f}"),
)


def plain_line(update: dict[str, Any]) -> str:
    """One timestamped line per step, for logs, nohup and CI."""
    metrics = update["metrics"]
    parts = [time.strftime("%H:%M:%S"), f"step {update['step']}/{update['total_steps']}", f"epoch {update['epoch']}"]
    for label, key, fmt in KEY_FIGURES:
        if key in metrics:
            parts.append(f"{label} {fmt.format(metrics[key])}")
    if "val/score/mean" in metrics:
        parts.append(f"val {metrics['val/score/mean']:.3f}")
    parts.append(f"eta {format_duration(update['eta_s'], clock=True)}")
    return "  ".join(parts)


class ConsoleProgress:
    """Progress callback: a rich live panel on a TTY (step, epoch, reward and its dimensions, loss, KL,
    tokens/s, memory, ETA), else one plain line per step on stdout."""

    def __init__(self, stream=None, *, live: bool | None = None) -> None:
        self.stream = stream or sys.stdout
        self.live_mode = self.stream.isatty() if live is None else live
        self._live = None

    def __enter__(self) -> ConsoleProgress:
        if self.live_mode:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(console=Console(file=self.stream), refresh_per_second=4, transient=False)
            self._live.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def __call__(self, update: dict[str, Any]) -> None:
        if self._live is None:
            print(plain_line(update), file=self.stream, flush=True)
        else:
            self._live.update(self._panel(update))

    def _panel(self, update: dict[str, Any]):
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        metrics = update["metrics"]
        table = Table.grid(padding=(0, 2))
        table.add_column(justify="right", style="bold")
        table.add_column()
        bar = ProgressBar(total=update["total_steps"], completed=update["step"], width=30)
        table.add_row("step", f"{update['step']}/{update['total_steps']}  epoch {update['epoch']}")
        table.add_row("", bar)
        for label, key, fmt in KEY_FIGURES:
            if key in metrics:
                table.add_row(label, fmt.format(metrics[key]))
        from core.rewards import DIMENSIONS, PENALTIES

        for label, names in (("dimensions", DIMENSIONS), ("penalties", PENALTIES)):
            parts = [f"{name} {metrics[f'reward/{name}/mean']:.2f}" for name in names if f"reward/{name}/mean" in metrics]
            if parts:
                table.add_row(label, "  ".join(parts))
        elapsed, eta = (format_duration(update[key], clock=True) for key in ("elapsed_s", "eta_s"))
        table.add_row("elapsed / eta", f"{elapsed} / {eta}")
        return table


def run_summary(run_path: Path) -> str:
    """The closing note: reward per dimension over the first vs the last quarter of steps, the best step,
    where the run is and how to watch it."""
    from core.runs import read_jsonl

    run_path = Path(run_path)
    rows = [r for r in read_jsonl(run_path / "metrics.jsonl") if "critic/score/mean" in r.get("data", {})]
    lines = [f"run folder: {run_path}"]
    if rows:
        quarter = max(1, len(rows) // 4)
        head, tail = rows[:quarter], rows[-quarter:]

        def mean(window: list[dict], key: str) -> float:
            values = [r["data"][key] for r in window if key in r["data"]]
            return sum(values) / len(values) if values else float("nan")

        best = max(rows, key=lambda r: r["data"]["critic/score/mean"])
        lines.append(f"steps: {rows[-1]['step']}   best step: {best['step']} (reward {best['data']['critic/score/mean']:.3f})")
        span = "step" if quarter == 1 else f"mean of {quarter} steps"
        lines.append(f"{'':<22}{'first':>8}{'last':>8}   ({span})")
        keys = ["critic/score/mean"] + [k for k in rows[-1]["data"] if k.startswith("reward/") and k != "reward/final/mean"]
        for key in keys:
            name = "reward" if key == "critic/score/mean" else key.split("/")[1]
            lines.append(f"{name:<22}{mean(head, key):>8.3f}{mean(tail, key):>8.3f}")
    lines.append(f"watch it: devops-rl tail {run_path} --follow   |   cockpit: devops-rl tui")
    return "\n".join(lines)
