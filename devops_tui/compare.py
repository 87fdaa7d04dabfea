"""What the cockpit compares between runs and eval results: curves, config differences and eval summaries, each
labelled by what produced it (model and settings), with A and B fixed by time, never by the order they were picked.

No Textual here: the Compare and Results screens load these in worker threads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.runs import META_FILE, METRICS_FILE, FileTail, parse_record, read_meta, run_status, status_text
from devops_tui.runfeed import thin_history
from devops_tui.series import Series, number_or_nan

_STAMP = re.compile(r"(\d{8}-\d{6})")


@dataclass
class RunCurves:
    """One compared run: its metric series (thinned like the Live screen's), flat config and eval results."""

    path: Path
    name: str
    status: str
    series: dict[str, Series] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    results: list[Path] = field(default_factory=list)
    steps: int | None = None


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as `dotted.key: value` (lists and scalars are leaves)."""
    if not isinstance(data, dict):
        return {prefix.rstrip("."): data} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def load_run(path: Path) -> RunCurves:
    """A run folder (or a verl file-logger JSONL) read for comparison."""
    import yaml

    path = Path(path)
    metrics = path if path.is_file() else path / METRICS_FILE
    lines, _ = thin_history(FileTail(metrics).poll())
    run = RunCurves(path=path, name=path.stem if path.is_file() else path.name, status="file")
    for line in lines:
        record = parse_record(line, metrics)
        data, step = (record or {}).get("data"), (record or {}).get("step")
        if not isinstance(data, dict) or not isinstance(step, int):
            continue
        for key, value in data.items():
            value = number_or_nan(value)
            if value is not None:
                run.series.setdefault(key, Series()).append(step, value)
        run.steps = step if run.steps is None else max(run.steps, step)
    if path.is_dir():
        meta = read_meta(path) or {}
        if (path / META_FILE).exists():
            run.status = status_text(run_status(meta), meta, run.steps)
        try:
            config = yaml.safe_load((path / "config.yaml").read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            config = None
        run.config = flatten(config) if isinstance(config, dict) else {}
        folder = path / "eval" if (path / "eval").is_dir() else path
        run.results = sorted(folder.glob("eval_results_*.json"), key=results_time)
    return run


def config_diff(runs: list[RunCurves]) -> list[tuple[str, list[str]]]:
    """(key, value per run) for every config key whose value differs between the runs (missing shows as `-`)."""
    from devops_tui.screens.config import format_config_value

    keys = sorted({key for run in runs for key in run.config})
    rows = []
    for key in keys:
        values = [format_config_value(run.config[key]) if key in run.config else "-" for run in runs]
        if len(set(values)) > 1:
            rows.append((key, values))
    return rows


def results_time(path: Path) -> float:
    """When an eval results file was made: the UTC stamp in its name, else its modification time."""
    match = _STAMP.search(Path(path).name)
    if match:
        return datetime.strptime(match.group(1), "%Y%m%d-%H%M%S").replace(tzinfo=UTC).timestamp()
    try:
        return Path(path).stat().st_mtime
    except OSError:
        return 0.0


def results_label(path: Path, data: dict, *, width: int = 60) -> str:
    """`model · max_tokens N · temperature T · MM-DD HH:MM`: what produced an eval results file."""
    settings = data.get("settings") or {}
    model = str(settings.get("model") or settings.get("model_path") or "?").rstrip("/").split("/")[-1]
    parts = [model]
    if settings.get("max_tokens") is not None:
        parts.append(f"{settings['max_tokens']} tok")
    if settings.get("temperature") is not None:
        parts.append(f"T {settings['temperature']}")
    if settings.get("split"):
        parts.append(str(settings["split"]))
    stamp = datetime.fromtimestamp(results_time(path), UTC).strftime("%m-%d %H:%M")
    return (" · ".join(parts) + f" · {stamp}")[:width]


def by_time(a: tuple[Path, dict], b: tuple[Path, dict]) -> tuple[tuple[Path, dict], tuple[Path, dict]]:
    """Two (path, results) pairs as (A, B): A the older, B the newer, whichever was picked first."""
    return (a, b) if results_time(a[0]) <= results_time(b[0]) else (b, a)
