"""`devops-rl tail RUN [--follow]`: the key metrics of a run as a table, plus its log lines as they come.

Works from any terminal while the run is going; `--follow` exits when the run's status leaves `running`
(or its process is gone), or on Ctrl-C. A rich live table on a terminal, plain lines when piped.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer

from core.formatting import format_number

# Preferred columns, in order; only those the run actually logs are shown (verl names, plus ours).
COLUMNS = (
    ("critic/score/mean", "reward"),
    ("val/score/mean", "val"),
    ("actor/pg_loss", "pg_loss"),
    ("actor/entropy", "entropy"),
    ("actor/ppo_kl", "kl"),
    ("actor/pg_clipfrac", "clipfrac"),
    ("actor/grad_norm", "grad"),
    ("response_length/mean", "resp_len"),
    ("timing_s/step", "step_s"),
)


def register(app: typer.Typer) -> None:
    app.command("tail")(tail)


class MetricsView:
    """The metric rows seen so far, keyed by step (a rewritten file replaces rows, never duplicates them), and the
    health alerts they raise (`core.runs.health`, the same checks the trainer and the cockpit run)."""

    def __init__(self, keep: int) -> None:
        from core.runs import HealthMonitor

        self.keep = keep
        self.rows: dict[int, dict] = {}
        self.keys: list[str] = []
        self.health = HealthMonitor()
        self.announced: set[tuple[str, str]] = set()  # alerts already printed (the trainer's events included)
        self.planned: float | None = None

    def reset(self) -> None:
        self.rows.clear()
        self.health.reset()

    def new_alerts(self) -> list[str]:
        """`alert | ...` lines for alerts that began since the last call and nobody printed yet."""
        lines = []
        for alert in self.health.poll_new():
            if alert.key not in self.announced:
                self.announced.add(alert.key)
                lines.append(f"alert | {alert.level} {alert.series} step {alert.step}: {alert.message}")
        return lines

    def add(self, record: dict) -> int | None:
        step, data = record.get("step"), record.get("data")
        if not isinstance(step, int) or not isinstance(data, dict):
            return None
        self.rows.setdefault(step, {}).update(data)
        self.health.add(step, data)
        if isinstance(data.get("training/total_steps"), (int, float)):
            self.planned = data["training/total_steps"]
        for key, _ in COLUMNS:
            if key in data and key not in self.keys:
                self.keys.append(key)
        self.keys.sort(key=[k for k, _ in COLUMNS].index)
        while len(self.rows) > self.keep:
            del self.rows[min(self.rows)]
        return step

    def header(self) -> list[str]:
        names = dict(COLUMNS)
        return ["step", *(names[k] for k in self.keys)]

    def line(self, step: int) -> list[str]:
        data = self.rows.get(step, {})
        return [str(step), *(format_number(data.get(k)) for k in self.keys)]


def _plain(cells: list[str]) -> str:
    return "  ".join(cell.rjust(9) for cell in cells).rstrip()


def _metrics_path(target: str) -> tuple[Path, object | None]:
    """(metrics file, RunDirectory or None): a run id/folder, or any verl file-logger JSONL given directly."""
    from core.runs import RunDirectory, resolve_run

    path = resolve_run(target, files=True)
    if path.is_file():
        check_metrics_file(path)
        return path, None
    run = RunDirectory(path)
    return run.metrics_path, run


SNIFF_BYTES = 64 * 1024  # what is read of a file given directly to tell a metrics file from anything else


def check_metrics_file(path: Path) -> None:
    """A file given directly must be a verl file-logger JSONL: one `{"step": N, "data": {...}}` line in its first
    64 KiB (an empty file is one that has not been written yet); anything else is refused with one line."""
    from core.errors import UserError, shorten
    from core.files import read_bytes
    from core.runs import metric_rows, parse_record

    head = read_bytes(path, "metrics file", SNIFF_BYTES, head=True)
    if not head.strip():
        return
    records = [r for r in (parse_record(line, path) for line in head.split(b"\n")) if r is not None]
    if not any(True for _ in metric_rows(records)):
        raise UserError(f"{shorten(path)}: not a metrics file (no {{\"step\": N, \"data\": {{...}}}} line in it); pass a "
                        "run id or folder, or a verl file-logger .jsonl")


def tail(
    run: str = typer.Argument(..., help="Run id (or a unique prefix), run folder, or a verl file-logger .jsonl file."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new steps and log lines until the run ends."),
    lines: int = typer.Option(10, "--lines", "-n", min=1, help="How many of the latest steps to show."),
    log_lines: bool = typer.Option(True, "--log/--no-log", help="Also show the run's log lines (train.log)."),
    interval: float = typer.Option(0.25, "--interval", min=0.05, help="Seconds between checks for new lines."),
) -> int:
    """Show a run's key metrics (and log lines); with --follow, live until the run ends."""
    from core.runs import GONE, FileTail, run_status, status_text

    metrics_path, run_dir = _metrics_path(run)
    view = MetricsView(keep=lines)
    metrics = FileTail(metrics_path)
    log_tail = FileTail(run_dir.log_path, from_end=0) if (run_dir is not None and log_lines) else None
    events = FileTail(run_dir.events_path, from_end=0) if run_dir is not None else None
    for record in metrics.poll_records():
        view.add(record)
    if not follow:
        print(_plain(view.header()))
        for step in sorted(view.rows):
            print(_plain(view.line(step)))
        if run_dir is not None and log_lines:
            from core.runs.reading import read_run_file

            text = read_run_file(run_dir.log_path).decode("utf-8", "replace")
            for line in text.splitlines()[-5:]:
                print(f"log | {line}")
        return 0

    def finished() -> str | None:
        """Why following should stop (the status line every face shows), or None while the run is going."""
        if run_dir is None:
            return None
        meta = run_dir.meta()
        status = run_status(meta)
        last = max(view.rows) if view.rows else None
        if status == GONE:
            return f"run {status_text(status, meta, last)}: process {meta.get('pid')} is gone (killed?) while its " \
                   "status says running"
        if meta.get("status") and status != "running":
            line = f"run {status_text(status, meta, last, int(view.planned) if view.planned else None)}"
            return line + (f": {meta['message']}" if meta.get("message") and status != "failed" else "")
        return None

    title = f"{run_dir.run_id if run_dir is not None else metrics_path.name}: following {metrics_path} (Ctrl-C to stop)"
    print(title, file=sys.stderr, flush=True)  # stdout stays the table, so it can be piped
    live = sys.stdout.isatty()
    return (_follow_live if live else _follow_plain)(view, metrics, log_tail, events, finished, interval)


def _event_line(record: dict) -> str:
    extra = " ".join(f"{k}={format_number(v)}" for k, v in record.items() if k not in ("time", "event"))
    return f"event | {record.get('event', '?')} {extra}".rstrip()


def _drain(view: MetricsView, metrics, log_tail, events) -> tuple[list[int], list[str]]:
    """New metric steps, and new log and event lines, since the last call."""
    restarts = metrics.restarts
    records = metrics.poll_records()
    if metrics.restarts != restarts:
        view.reset()
    steps = [s for s in (view.add(r) for r in records) if s is not None]
    logs = [f"log | {raw.decode('utf-8', 'replace')}" for raw in log_tail.poll()] if log_tail is not None else []
    if events is not None:
        for record in events.poll_records():
            if record.get("event") == "alert":
                view.announced.add((str(record.get("check")), str(record.get("series"))))
            logs.append(_event_line(record))
    logs += view.new_alerts()
    return steps, logs


def _follow_plain(view, metrics, log_tail, events, finished, interval) -> int:
    printed_header: list[str] = []

    def print_steps(steps) -> None:
        """The rows of these steps, each time the columns changed preceded by a new header."""
        nonlocal printed_header
        for step in steps:
            if view.header() != printed_header:
                printed_header = view.header()
                print(_plain(printed_header), flush=True)
            print(_plain(view.line(step)), flush=True)

    print_steps(sorted(view.rows))
    while True:
        done = finished()  # read before draining, so lines written just before the end are still shown
        steps, logs = _drain(view, metrics, log_tail, events)
        print_steps(dict.fromkeys(steps))
        for line in logs:
            print(line, flush=True)
        if done and not steps and not logs:
            print(done, flush=True)
            return 0
        if not steps and not logs:
            time.sleep(interval)


def _follow_live(view, metrics, log_tail, events, finished, interval) -> int:
    from collections import deque

    from rich.console import Group
    from rich.live import Live
    from rich.table import Table
    from rich.text import Text

    recent_logs: deque[str] = deque(maxlen=8)

    def render():
        table = Table(box=None, header_style="bold")
        for name in view.header():
            table.add_column(name, justify="right", no_wrap=True)
        for step in sorted(view.rows):
            table.add_row(*view.line(step))
        parts = [table]
        if recent_logs:
            parts.append(Text("\n".join(recent_logs), overflow="ellipsis", no_wrap=True, style="dim"))
        return Group(*parts)

    with Live(render(), refresh_per_second=4, transient=False) as live:
        while True:
            done = finished()
            steps, logs = _drain(view, metrics, log_tail, events)
            recent_logs.extend(logs)
            if steps or logs:
                live.update(render())
            if done and not steps and not logs:
                break
            if not steps and not logs:
                time.sleep(interval)
    print(done)
    return 0

