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
from core.runs.health import Alert, HealthMonitor, Thresholds, by_severity, run_alerts
from core.runs.lock import LOCK_FILE, RunLock, describe_holder, lock_holder
from core.runs.process import STOP_GRACE_S, local_pid, on_this_host, pid_alive, stop_child, stop_process
from core.runs.reading import FileTail, last_step, metric_rows, parse_record, read_jsonl
from core.runs.resolve import find_run, resolve_run
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
    "CONFIG_FILE", "EVENTS_FILE", "GONE", "LOCK_FILE", "LOG_FILE", "META_FILE", "METRICS_FILE", "PLANNED_KEY",
    "REWARD_KEYS", "SAMPLES_FILE", "STATUSES", "STOP_GRACE_S", "Alert", "FileTail", "HealthMonitor", "MetricsDigest",
    "RunDirectory", "RunLock", "RunSummary", "Thresholds", "append_jsonl", "by_severity", "describe_holder",
    "find_run", "last_step", "list_runs", "local_pid", "lock_holder", "metric_rows", "new_run_id", "now_iso",
    "on_this_host", "parse_record", "pid_alive", "planned_steps", "read_jsonl", "read_meta", "resolve_run",
    "reward_of", "run_alerts", "run_alive", "run_status", "status_text", "stop_child", "stop_process", "summarize",
]
