"""`devops-rl train` (GRPO on the torch or verl backend) and `devops-rl sft` (the supervised warm-start).

Everything heavy is imported inside the commands; the run itself lives in `core.training.train`.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import typer

from core.errors import UserError, shorten

log = logging.getLogger(__name__)

TRAIN_HELP = """Train the agent with GRPO (native torch or verl) into a run folder.

Modes: train (the default preset), ci-fast (the built-in tiny model on a CPU in minutes), single-gpu,
test (a seconds-long self-check: dataset, reward, config and one tiny step).
Exit codes: 0 finished; 130 stopped by Ctrl-C/SIGTERM (continue with --resume: torch saves a checkpoint
on stop, verl continues from its last periodic one, trainer.save_freq); 1 the run failed, on either
backend (NaN/inf, a verl error, a verl start-up that stalled: the run's status says why, train.log how);
2 bad input, or a machine that cannot run it (nothing was trained)."""


def _open_run_dir(run_dir: Path | None, resume: bool, mode: str):
    """The run folder to use: `--run-dir` exactly, else the newest resumable run (`--resume`), else None.

    A run to resume is locked here (the single-writer rule), before anything in it is read for the run or written,
    and its meta.json and config.yaml must be whole.
    """
    from core.runs import RunDirectory, list_runs

    if run_dir is not None:
        _check_run_dir_path(run_dir)
        exists = (run_dir / "meta.json").exists()
        if resume and not exists:
            raise UserError(f"--resume: {shorten(run_dir)} is not a run folder (no meta.json); "
                            "drop --resume to start a new run there")
        if exists and not resume:
            raise UserError(f"--run-dir: {shorten(run_dir)} already holds a run; "
                            "add --resume to continue it or pick a new folder")
        if not exists:
            return None
        run = RunDirectory(run_dir)
    elif not resume:
        return None
    else:
        newest_first = (RunDirectory(r.path) for r in sorted(list_runs(), key=lambda r: r.run_id, reverse=True) if r.mode == mode)
        run = next((r for r in newest_first if any(r.checkpoints_dir.glob("global_step_*"))), None)
        if run is None:
            raise UserError(f"--resume: no run of mode '{mode}' with a checkpoint under the runs folder; pass --run-dir")
    run.hold_lock()
    try:
        _check_run_files(run)
    except BaseException:
        run.release_lock()
        raise
    return run


def _check_run_dir_path(run_dir: Path) -> None:
    """A --run-dir must be a folder or a name for a new one: not a file, FIFO or device, nor a symlink that leads
    nowhere (a loop, a missing target: creating the folder would fail or land elsewhere)."""
    import os

    from core.files import file_kind

    if run_dir.is_symlink() and not run_dir.exists():
        raise UserError(f"--run-dir {shorten(run_dir)}: is a symbolic link that leads nowhere (a loop or a missing "
                        f"target: {shorten(os.readlink(run_dir))}); give a folder")
    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"--run-dir {shorten(run_dir)}: is {file_kind(run_dir.stat().st_mode)}, not a folder; give a "
                        "folder (new, or a run's to --resume)")


def _check_run_files(run) -> None:
    """A run to resume needs its meta.json (which run it is) and its config.yaml (its settings), both whole."""
    from core.runs import read_meta
    from core.runs.folder import meta_problem

    meta = read_meta(run.path)
    problem = "is not a JSON object (damaged?)" if meta is None else meta_problem(meta)
    if problem is not None:
        where = shorten(run.path / "meta.json") + ("" if meta is None else ":")
        raise UserError(f"--resume: {where} {problem}; it says which run this is, so nothing is resumed: restore it, "
                        f"or start a new run with --config {shorten(run.config_path)}")
    run.meta()
    if not run.config_path.is_file() or not run.config_path.read_bytes().strip():
        state = "empty" if run.config_path.is_file() else "missing"
        raise UserError(f"--resume: {shorten(run.config_path)} is {state}, and with it the run's settings; restore it, "
                        "or pass --config FILE with the same settings")


def _check_resumable(run, backend: str, cfg) -> None:
    """Refuse a resume that would append steps again or has nothing to do, before the run's status is touched."""
    from core.runs import read_jsonl
    from core.training.config import total_steps

    if backend == "verl":
        from core.training.verl_backend.follow import latest_checkpoint_step

        newest = latest_checkpoint_step(run.checkpoints_dir)
    else:
        from core.training.checkpoint import list_checkpoints

        found = list_checkpoints(run.checkpoints_dir)
        newest = found[-1][0] if found else None
    if newest is None:
        written = [e.get("step") for e in read_jsonl(run.events_path) if e.get("event") == "checkpoint"]
        if written:
            raise UserError(f"--resume: {shorten(run.path)} wrote checkpoints (the newest of step {written[-1]}) but none "
                            f"is left in {shorten(run.checkpoints_dir)}, so its steps would run and be logged again; "
                            "restore them, or start a new run")
        return  # never checkpointed: the backend starts again from step 0 with the metrics emptied
    steps = total_steps(cfg)
    if run.meta().get("status") == "finished" and steps is not None and newest >= steps:
        raise UserError(f"--resume: {shorten(run.path)} already finished all {steps} steps; raise "
                        "trainer.total_training_steps with --set to train further, or start a new run")


def _note_task_changes(run, task_files: list[dict]) -> None:
    """A resumed run whose task files changed since it started: a warning (log and event), and meta.json's
    `task_files` brought up to date (the earlier list stays in the event)."""
    before = run.meta().get("task_files")
    if before is not None and before != task_files:
        old = {r.get("path"): r.get("sha256") for r in before if isinstance(r, dict)}
        new = {r["path"]: r["sha256"] for r in task_files}
        changed = sorted(str(p) for p in old.keys() | new.keys() if old.get(p) != new.get(p))
        log.warning("--resume: the task files changed since the run started (%s); training goes on with them as they "
                    "are now", ", ".join(changed) or "weights")
        run.event("warning", message="task files changed since the run started", before=before)
    run.update_meta(task_files=task_files)


def curriculum_record(cfg) -> dict:
    """meta.json's `curriculum`: each stage's steps, sources with their weights and task counts ({} without one)."""
    if not cfg.devops.curriculum:
        return {}
    from core.training.curriculum import training_stages

    return {"curriculum": [stage.record() for stage in training_stages(cfg.devops)[0]]}


def train(
    mode: str = typer.Option("train", "--mode", help="train | ci-fast | single-gpu | test"),
    model: str | None = typer.Option(None, "--model", help="builtin:tiny, a model folder, or a cached Hugging Face id."),
    config: Path | None = typer.Option(None, "--config", help="YAML config file (over the mode's preset)."),
    overrides: list[str] = typer.Option([], "--set", help="Dotted override, e.g. --set data.train_batch_size=8 (repeatable)."),
    task_paths: list[Path] = typer.Option([], "--tasks", help="Task file (YAML/JSONL) or folder to train and validate on "
                                          "instead of the built-in tasks (repeatable; sets devops.tasks)."),
    backend: str | None = typer.Option(None, "--backend", help="auto | torch | verl (default: devops.backend)."),
    run_dir_text: str | None = typer.Option(None, "--run-dir", help="Use exactly this run folder (created if new)."),
    resume: bool = typer.Option(False, "--resume",
                                help="Continue from the newest checkpoint (of --run-dir, or the newest run of this mode)."),
    n_runners: int | None = typer.Option(None, "--n-runners", min=1,
                                         help="Parallel workers: reward-scoring processes (torch), agent-loop workers (verl)."),
    seed: int | None = typer.Option(None, "--seed", help="Random seed (devops.seed)."),
    ray_address: str | None = typer.Option(None, "--ray-address", help="Join an existing Ray cluster (verl backend only)."),
) -> int:
    from core.training.signals import StopRequest

    # Installed before the heavy imports: a Ctrl-C or SIGHUP from now on asks the run to stop (exit 130, status
    # stopped), instead of a KeyboardInterrupt breaking an import half-way (transformers turns it into an ImportError).
    with StopRequest() as stop:
        from core.runs import RunDirectory
        from core.training.progress import ConsoleProgress, run_summary
        from core.training.train import check_ray_address, choose_backend, config_for_mode, run_training

        # Every check comes before the first line of output and before anything is written: bad input is one line.
        if run_dir_text is not None and not run_dir_text.strip():
            raise UserError("--run-dir: empty; give a folder (new, or a run's to --resume), or leave the option out")
        run_dir = Path(run_dir_text) if run_dir_text is not None else None
        existing = _open_run_dir(run_dir, resume, mode)
        target = existing
        try:
            resolved = existing is not None and config is None
            if resolved:
                config = existing.config_path  # a resumed run keeps its own settings (--set still applies)
            cfg = config_for_mode(
                mode, config_file=config, overrides=overrides, model=model, seed=seed, backend=backend, n_runners=n_runners,
                resolved=resolved,
            )
            if task_paths:
                from tasks.sources import option_paths

                cfg.devops.tasks = [{"path": path} for path in option_paths(task_paths)]
            from core.cli.config_cmd import refuse_invalid
            from tasks.sources import task_file_records

            refuse_invalid(cfg)
            task_files = task_file_records(cfg.devops.tasks)  # a bad task file is one line, before any run folder
            curriculum = curriculum_record(cfg)  # and so is a bad curriculum source
            chosen, why = choose_backend(cfg.devops.backend, ray_address)
            if existing is not None:
                chosen = existing.meta().get("backend") or chosen  # a run keeps the backend it started with
            check_ray_address(chosen, ray_address)
            if chosen == "torch":  # a missing or broken model is a one-line error before any run folder is made
                from core.training.model_files import check_model_files
                from core.training.tiny_model import resolve_model_path

                check_model_files(resolve_model_path(cfg.actor_rollout_ref.model.path))
            if stop:  # stopped while checking: no run is made
                log.warning("stopped by %s before the run started: nothing was written", stop.signal_name)
                return 130
            if existing is not None:
                _check_resumable(existing, chosen, cfg)
                existing.mark_resumed()
                _note_task_changes(existing, task_files)
                existing.update_meta(**curriculum)
            else:
                root, run_id = ((run_dir.parent, run_dir.name) if run_dir is not None
                                else (cfg.devops.runs_dir and Path(cfg.devops.runs_dir), None))
                target = RunDirectory.create(root or None, mode=mode, backend=chosen, config=cfg, run_id=run_id)
                target.update_meta(task_files=task_files, **curriculum)
            log.info(why)
            if model is None and cfg.actor_rollout_ref.model.path == "builtin:tiny" and mode in ("ci-fast", "test"):
                log.info("model: the built-in tiny model (builtin:tiny), built locally; pass --model to train another")
            log.info("run folder: %s", target.path)
            try:
                with ConsoleProgress() as progress:
                    run_training(cfg, mode=mode, run_dir=target, resume=resume, progress=progress, ray_address=ray_address)
            except BaseException as exc:
                target.undo_resume(str(exc) or type(exc).__name__)  # a no-op once the backend started training
                raise
            status = target.meta().get("status")
            print(run_summary(target.path), file=sys.stdout, flush=True)
            return 130 if status == "stopped" else 0
        finally:
            if target is not None:
                target.release_lock()  # the process's end would drop it too; a caller in the same process needs it now


def sft(
    model: str = typer.Option("builtin:tiny", "--model", help="Base model: builtin:tiny, a folder or a cached HF id."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Model folder to write (default: <runs>/sft-<time>)."),
    steps: int = typer.Option(200, "--steps", min=1, help="Optimizer steps."),
    lr: float = typer.Option(3e-3, "--lr", min=0.0, help="Peak learning rate (warm-up then cosine)."),
    batch_size: int = typer.Option(4, "--batch-size", min=1),
    max_length: int = typer.Option(1024, "--max-length", min=32, help="Prompt + answer tokens per example."),
    val_fraction: float = typer.Option(0.2, "--val-fraction", help="Tasks held out (the same split training validates on)."),
    seed: int = typer.Option(0, "--seed"),
    task_paths: list[Path] = typer.Option([], "--tasks", help="Task file (YAML/JSONL) or folder to learn from instead of "
                                          "the built-in tasks (repeatable)."),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda"),
    force: bool = typer.Option(False, "--force", help="Replace the --output folder if it exists."),
) -> int:
    import time

    from core.paths import runs_root, writable_dir
    from core.training.model_files import check_model_files
    from core.training.sft import SftSettings, run_sft
    from core.training.tiny_model import resolve_model_path
    from tasks.sources import config_split, option_paths

    output = output or runs_root() / f"sft-{time.strftime('%Y%m%d-%H%M%S')}"
    if output.exists() and not (output.is_dir() and not any(output.iterdir())) and not force:
        raise UserError(f"--output {shorten(output)}: exists; sft replaces the whole folder, so pick a new one (or add "
                        "--force to replace it)")
    writable_dir(output.parent, "--output's folder")
    base = resolve_model_path(model)
    check_model_files(base)
    from types import SimpleNamespace

    sources = [{"path": path} for path in option_paths(task_paths)]
    train_tasks, _, _ = config_split(SimpleNamespace(tasks=sources, val_fraction=val_fraction, seed=seed))
    every = max(1, steps // 10)

    def report(update: dict) -> None:
        if update["step"] % every == 0 or update["step"] == update["total_steps"]:
            print(f"{time.strftime('%H:%M:%S')} sft step {update['step']}/{update['total_steps']}  "
                  f"loss {update['loss']:.4f}  lr {update['lr']:.2e}", flush=True)

    settings = SftSettings(steps=steps, lr=lr, batch_size=batch_size, max_length=max_length, seed=seed)
    summary = run_sft(base, output, settings, train_tasks, device=device, progress=report)
    print(f"loss {summary['first_loss']:.3f} -> {summary['last_loss']:.3f} "
          f"on {summary['examples']} tasks in {summary['seconds']:.0f}s")
    print(f"model folder: {output}\ntrain from it: devops-rl train --mode ci-fast --model {output}")
    return 0


def register(app: typer.Typer) -> None:
    app.command("train", help=TRAIN_HELP)(train)
    app.command("sft", help="Supervised warm-start on the tasks' reference answers (loss on the answer tokens only).")(sft)
