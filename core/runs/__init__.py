"""Everything about a run folder: writing it, reading and following its files, summarising, finding and stopping runs.

Backends write through `RunDirectory`; the CLI and the cockpit only read. Files: docs/run-format.md.
"""

from core.runs.folder import (
    CONFIG_FILE,
    EVENTS_FILE,
    LOG_FILE,
    META_FILE,
    METRICS_FILE,
    SAMPLES_FILE,
    STATUSES,
    RunDirectory,
    append_jsonl,
    new_run_id,
    now_iso,
    read_meta,
)
from core.runs.process import STOP_GRACE_S, local_pid, on_this_host, pid_alive, stop_process
from core.runs.reading import FileTail, last_step, metric_rows, parse_record, read_jsonl
from core.runs.resolve import find_run, resolve_run
from core.runs.health import Alert, HealthMonitor, Thresholds, by_severity, run_alerts
from core.runs.summary import (
    GONE,
    PLANNED_KEY,
    REWARD_KEYS,
    MetricsDigest,
    RunSummary,
    list_runs,
    planned_steps,
    reward_of,
    run_alive,
    run_status,
    status_text,
    summarize,
)

__all__ = [
    "Alert", "HealthMonitor", "Thresholds", "by_severity", "run_alerts", "PLANNED_KEY", "planned_steps", "status_text",
    "CONFIG_FILE", "EVENTS_FILE", "GONE", "LOG_FILE", "META_FILE", "METRICS_FILE", "REWARD_KEYS", "SAMPLES_FILE",
    "STATUSES", "STOP_GRACE_S", "FileTail", "MetricsDigest", "RunDirectory", "RunSummary", "append_jsonl",
    "find_run", "last_step", "list_runs", "local_pid", "metric_rows", "new_run_id", "now_iso", "on_this_host",
    "parse_record", "pid_alive", "read_jsonl", "read_meta", "resolve_run", "reward_of", "run_alive", "run_status",
    "stop_process", "summarize",
]
