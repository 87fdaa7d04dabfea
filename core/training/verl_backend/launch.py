"""Run verl into a run folder: the caller's process prepares and watches, a child process runs verl's trainer.

The child (`python -m core.training.verl_backend.launch RUN_DIR`) calls verl's own `run_ppo` with the
composed config, its output (Ray's and verl's logs) going to the run's train.log. The parent copies
verl's file-logger lines into metrics.jsonl with NVML figures, turns checkpoints and validations into
events, and maps Ctrl-C, exit codes and --resume onto the run folder's status like the native backend;
a watchdog fails a start-up that stalls (verl waits silently for Ray resources).
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from core.errors import UserError
from core.runs import stop_child
from core.training.signals import StopRequest
from core.training.verl_backend import ray_auth
from core.training.verl_backend.follow import (
    STARTUP_NAME,
    VERL_METRICS_NAME,
    MetricsPump,
    StartupWatchdog,
    latest_checkpoint_step,
    startup_limits,
)

log = logging.getLogger(__name__)

VERL_DIR = "verl"  # inside the run folder: composed config, verl's own metrics file, rollouts, exit note
CONFIG_NAME, EXIT_NAME = "config.yaml", "exit.json"
EXIT_RAY = 3  # the child's exit code when Ray could not start
RAY_TOKEN_HINT = ("the cluster wants its token; export RAY_AUTH_MODE=token and RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH "
                  "(from 'ray get-auth-token' on its head; docs/gpu.md)")
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # Ray colours its error headers and worker prefixes

def child_command(run_path: Path) -> list[str]:
    """The child process: this module's `child_main` on the run folder, in the same Python."""
    return [sys.executable, "-P", "-m", "core.training.verl_backend.launch", str(run_path)]  # -P: see devops_tui/launcher.py


def child_env(verl_dir: Path) -> dict[str, str]:
    """The child's environment: verl's file logger in the run folder, every Ray worker's lines in train.log."""
    env = dict(os.environ)
    env.update({
        "VERL_FILE_LOGGER_PATH": str(verl_dir.absolute() / VERL_METRICS_NAME),
        "PYTHONUNBUFFERED": "1",
        "RAY_DEDUP_LOGS": "0",  # every worker's lines in train.log, not "repeated 7x"
    })
    return env


def strip_escapes(text: str) -> str:
    return ANSI_ESCAPE.sub("", text)


def error_line(exc: BaseException) -> str:
    """`Type: message` of what really failed: a Ray task error (a TaskRunner's wrapping a worker's, ...)
    unwrapped to its cause, escapes stripped, the message's first line."""
    from ray.exceptions import RayTaskError

    while isinstance(exc, RayTaskError) and isinstance(exc.cause, BaseException) and exc.cause is not exc:
        exc = exc.cause
    lines = [line.strip() for line in strip_escapes(str(exc)).splitlines() if line.strip()]
    if isinstance(exc, UserError):  # already one line saying what to change
        return lines[0] if lines else type(exc).__name__
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _last_error_line(log_path: Path) -> str:
    """The most telling line near the end of train.log (an Error/Exception line), for the status message."""
    try:
        with open(log_path, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - 64_000))
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return "see train.log"
    lines = [strip_escapes(line).strip() for line in lines]
    for text in reversed(lines):
        if any(word in text for word in ("Error", "Exception", "error:")) and not text.startswith("File "):
            return text[-300:]
    return next((text[-300:] for text in reversed(lines) if text), "see train.log")


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it if this process dies (SIGKILL, crash), so verl never runs orphaned."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def resume_step(composed, checkpoints: Path) -> int | None:
    """The step verl resumes from under the composed config's `trainer.resume_mode` (None: no checkpoint yet).

    UserError where `--resume` cannot mean resuming: verl would start over from step 1.
    """
    mode = composed.trainer.resume_mode
    if mode == "disable":
        raise UserError("--resume: trainer.resume_mode is 'disable' in this run's config, so verl would start again "
                        "from step 1; add --set trainer.resume_mode=auto, or start a new run without --resume")
    if mode == "resume_path":  # verl takes the step from the folder name, as here
        path = str(composed.trainer.resume_from_path or "")
        step = path.rstrip("/").rsplit("global_step_", 1)[-1] if "global_step_" in path else ""
        if not step.isdigit():
            raise UserError(f"verl_overrides.trainer.resume_from_path: {path!r}: trainer.resume_mode=resume_path needs "
                            "a checkpoint folder named global_step_N")
        return int(step)
    return latest_checkpoint_step(checkpoints)


def prepare(cfg, *, run_dir, resume: bool, ray_address: str | None) -> Path:
    """Checks, the composed config, resume bookkeeping and the parquet export; returns the run's verl folder.

    Every check runs before anything in the run folder changes.
    """
    from core.training.config import total_steps
    from core.training.verl_backend import compose, data
    from core.training.verl_backend.detect import check_cpus, check_launch, local_ray_cpus

    check_launch(cfg, ray_address=ray_address)
    composed = compose.compose_verl_config(cfg, run_path=run_dir.path, resume=resume, ray_address=ray_address)
    if not ray_address:  # a cluster's CPUs are checked inside it, by the TaskRunner
        check_cpus(composed, local_ray_cpus(composed), cluster=False)
    data.check_prompt_fit(cfg)
    step = resume_step(composed, run_dir.checkpoints_dir) if resume else None

    verl_dir = run_dir.path / VERL_DIR
    verl_dir.mkdir(parents=True, exist_ok=True)
    previous = verl_dir / VERL_METRICS_NAME
    if previous.exists():  # verl's file logger restarts its file; keep the last attempt's beside it
        previous.rename(verl_dir / f"metrics.attempt-{int(time.time())}.jsonl")
    for stale in (EXIT_NAME, STARTUP_NAME):
        (verl_dir / stale).unlink(missing_ok=True)
    if resume and step is None:
        run_dir.event("warning", message="--resume: no verl checkpoint in this run yet; starting from step 0")
        run_dir.truncate_metrics_after(0)
    elif resume:
        run_dir.truncate_metrics_after(step)
        run_dir.event("resumed", step=step, checkpoint=str(run_dir.checkpoints_dir / f"global_step_{step}"))
    written = data.export_parquet(cfg, run_dir.path / "data")
    compose.save(composed, verl_dir / CONFIG_NAME)
    # verl counts epochs over train.parquet, which holds every curriculum stage (data.split_rows)
    steps = total_steps(cfg, data.row_count(written["train"]) if cfg.devops.curriculum else None)
    if steps is not None:
        run_dir.update_meta(total_steps=steps)
    return verl_dir


def run_verl_training(cfg, *, mode: str, run_dir, resume: bool = False, ray_address: str | None = None,
                      progress: Callable[[dict], None] | None = None, poll_interval: float = 1.0):
    """Train with verl into `run_dir` (status, events, metrics, checkpoints); returns the run directory.

    Blocks until verl ends; Ctrl-C stops verl (and its Ray workers) and leaves status `stopped`. Raises
    UserError when verl cannot start here, TrainingFailed when the run fails (start-up stalled, verl's
    error); status `failed` is written first either way.
    """
    from core.training import sysmon

    run_dir.hold_lock()  # this process (the parent) holds the run's writer lock for the child's whole life
    try:
        limits = startup_limits()
        verl_dir = prepare(cfg, run_dir=run_dir, resume=resume, ray_address=ray_address)
    except Exception as exc:
        message = str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"
        if not run_dir.undo_resume(message):  # a resume attempt puts the run's status back, as the torch backend
            run_dir.set_status("failed", message)
            run_dir.event("failed", message=message)
        raise
    pump = MetricsPump(run_dir, verl_dir, sample=sysmon.sample, progress=progress,
                       samples_per_step=cfg.devops.samples_per_step)
    pump.skip_existing_rollouts()
    watchdog = StartupWatchdog(verl_dir, limits)
    log.info("verl: starting the trainer (logs in %s)", run_dir.log_path)
    token = ray_auth.token_file(os.environ, ray_address)
    if token is not None:
        log.info("verl: the local Ray cluster's auth token is %s (%s=FILE keeps it out of a shared HOME)",
                 token, ray_auth.TOKEN_PATH)
    with open(run_dir.log_path, "ab") as log_file:
        child = subprocess.Popen(
            child_command(run_dir.path),
            stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
            env=child_env(verl_dir), start_new_session=True,  # Ctrl-C reaches us; we stop verl in order
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
    run_dir.update_meta(pid=os.getpid(), child_pid=child.pid)
    stopped_by = stalled = None
    try:
        with StopRequest(interrupt=True) as stop:  # SIGTERM (the cockpit's stop) acts like Ctrl-C
            try:
                while child.poll() is None:
                    pump.poll()
                    if pump.last_step is not None:
                        run_dir.resume_started()  # from its first step a failure is the run's own, not the resume's
                    stalled = watchdog.poll(stepped=pump.last_step is not None)
                    if stalled:
                        log.error("verl: %s; stopping it", stalled)
                        stop_child(child)
                        break
                    time.sleep(poll_interval)
            except KeyboardInterrupt:
                stopped_by = stop.signal_name or "SIGINT"
                log.info("verl: stopping (%s); waiting for Ray to shut down", stopped_by)
                stop_child(child)  # SIGINT to its group (verl and Ray shut down), then SIGTERM, then SIGKILL
    finally:
        if child.poll() is None:
            stop_child(child)
    pump.poll(final=True)  # what verl wrote last
    return _finish(run_dir, verl_dir, child.returncode, stopped_by, pump.last_step, stalled)


def _finish(run_dir, verl_dir: Path, code: int, stopped_by: str | None, step: int | None, stalled: str | None = None):
    from core.training.actor import TrainingFailed

    note = {}
    try:
        note = json.loads((verl_dir / EXIT_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    if stalled is None and code == 0:
        run_dir.set_status("finished", f"{step or 0} steps")
        run_dir.event("finished", step=step)
        return run_dir
    if stalled is None and (stopped_by or code in (130, -signal.SIGINT)):
        saved = latest_checkpoint_step(run_dir.checkpoints_dir)
        resumes = (f"--resume continues from step {saved}, its last checkpoint (trainer.save_freq)" if saved is not None
                   else "it has saved no checkpoint yet, so --resume starts over")
        run_dir.set_status("stopped", f"stopped by {stopped_by or 'SIGINT'} at step {step or 0}; verl saves no "
                                      f"checkpoint on stop: {resumes}")
        run_dir.event("stopped", step=step, signal=stopped_by or "SIGINT", checkpoint=saved)
        return run_dir
    message = stalled or note.get("message") or _last_error_line(run_dir.log_path)
    if stalled is None and code == EXIT_RAY:
        message = f"Ray could not start: {message}; check 'ray status', free ports and /tmp space, or --ray-address"
    if step is not None or not run_dir.undo_resume(message):  # a resume that never stepped keeps the run's status
        run_dir.set_status("failed", message)
        run_dir.event("failed", step=step, message=message, exit_code=code)
    raise TrainingFailed(f"verl training failed: {message} (full log: {run_dir.log_path})")


# ---- the child process ------------------------------------------------------------------------------


def _write_exit(verl_dir: Path, status: str, message: str | None = None) -> None:
    (verl_dir / EXIT_NAME).write_text(json.dumps({"status": status, "message": message}), encoding="utf-8")


def child_main(run_path: str) -> int:
    """Run verl's trainer on the run's composed config, as `verl.trainer.main_ppo.main` would."""
    from core.log import setup_logging

    run = Path(run_path)
    verl_dir = run / VERL_DIR
    setup_logging(console=False, log_file=run / "train.log")
    import ray
    from verl.trainer.main_ppo import run_ppo
    from verl.utils.device import auto_set_device

    from core.training.verl_backend import compose

    config = compose.load(verl_dir / CONFIG_NAME)
    auto_set_device(config)
    compose.validate_with_verl(config)
    if config.trainer.use_v1:
        from core.training.verl_backend.runner import RemoteTaskRunner as runner
    else:  # verl's legacy trainer: the reward dimensions reach the metrics at validation only
        from verl.trainer.main_ppo_v0 import TaskRunner as runner
    try:
        token_note = ray_auth.prepare_local_token(os.environ, config.ray_kwargs.ray_init.get("address"))
        if token_note:
            log.info("%s", token_note)
        run_ppo(config, task_runner_class=runner)
    except KeyboardInterrupt:
        _write_exit(verl_dir, "stopped")
        return 130
    except Exception as exc:
        started = ray.is_initialized()
        message = error_line(exc)
        if not started and "AuthenticationError" in "".join(traceback.format_exception(exc)):
            message += f" ({RAY_TOKEN_HINT})"
        log.error("verl failed: %s", message, exc_info=True)
        _write_exit(verl_dir, "failed", message[:500])
        return 1 if started else EXIT_RAY
    finally:
        if ray.is_initialized():
            ray.shutdown()
    _write_exit(verl_dir, "finished")
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM from the parent: shut Ray down too
    sys.exit(child_main(sys.argv[1]))
