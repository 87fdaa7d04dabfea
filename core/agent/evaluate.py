"""Evaluation: the agent answers a set of tasks concurrently; every answer is scored and saved as it lands.

`EvalSettings` is what `devops-rl eval` was asked; `evaluate` picks the tasks and the endpoint (serving a
local model or run in-process if needed) and `run_eval` fills the results file (`core.agent.results`).
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from core.agent.results import RESULTS_PREFIX, ResultsFile, check_writable, find_resumable, new_results_path, result_entry
from core.errors import UserError

log = logging.getLogger(__name__)

SPLITS = ("val", "train", "all")


@dataclass(frozen=True)
class EvalSettings:
    """What to evaluate, against which endpoint, with which sampling, and where the results go."""

    base_url: str | None = None
    model: str | None = None
    local: str | None = None
    run: str | None = None
    split: str = "val"
    task_type: str | None = None
    difficulty: str | None = None
    task_ids: tuple[str, ...] = ()
    limit: int | None = None
    concurrency: int = 4
    temperature: float | None = None
    max_tokens: int | None = None
    timeout: float | None = None
    retries: int | None = None
    seed: int | None = None
    out: Path | None = None
    resume: bool = False
    device: str = "auto"
    tasks: tuple[str, ...] = ()  # task files or folders (`--tasks`); empty: the run's devops.tasks, else tasks/data

    def __post_init__(self) -> None:
        from core.agent.client import (
            DEFAULT_MAX_TOKENS,
            DEFAULT_RETRIES,
            DEFAULT_TEMPERATURE,
            DEFAULT_TIMEOUT_S,
            check_request_settings,
        )

        if self.base_url and self.local:
            raise UserError("--base-url and --local both given; pick one endpoint")
        if self.concurrency < 1:
            raise UserError(f"--concurrency: {self.concurrency} must be at least 1")
        if self.limit is not None and self.limit < 1:
            raise UserError(f"--limit: {self.limit} must be at least 1")
        check_request_settings(temperature=DEFAULT_TEMPERATURE if self.temperature is None else self.temperature,
                               max_tokens=DEFAULT_MAX_TOKENS if self.max_tokens is None else self.max_tokens,
                               timeout=DEFAULT_TIMEOUT_S if self.timeout is None else self.timeout,
                               retries=DEFAULT_RETRIES if self.retries is None else self.retries)

    def record(self, *, model: str, model_path: Path | None, run_path: Path | None, concurrency: int) -> dict:
        """The `settings` written into the results file (no key: a key in the URL is masked)."""
        from core.log import mask_secrets

        return {"base_url": None if self.local else mask_secrets(self.base_url), "model": model, "local": self.local,
                "model_path": str(model_path) if model_path else None, "run": str(run_path) if run_path else None,
                "split": self.split if not self.task_ids else "ids", "type": self.task_type, "difficulty": self.difficulty,
                "limit": self.limit, "temperature": self.temperature, "max_tokens": self.max_tokens, "seed": self.seed,
                "concurrency": concurrency, "tasks": list(self.tasks)}


def select_tasks(
    split: str = "val",
    task_type: str | None = None,
    difficulty: str | None = None,
    task_ids: Iterable[str] = (),
    limit: int | None = None,
    *,
    val_fraction: float = 0.2,
    seed: int = 0,
    devops=None,
) -> list:
    """The tasks to evaluate: a split (as training splits them), optionally one type/difficulty, ids, a limit.
    `devops` is a training config's `devops` section (its task sources and split settings); without it the
    built-in tasks split by `val_fraction` and `seed`."""
    import tasks as task_lib
    from tasks.sources import config_split, load_sources

    if split not in SPLITS:
        raise UserError(f"--split: '{split}' is not one of {', '.join(SPLITS)}")
    if devops is None:
        from types import SimpleNamespace

        devops = SimpleNamespace(tasks=[], val_fraction=val_fraction, seed=seed)
    everything = load_sources(devops.tasks)
    ids = list(task_ids)
    if ids:
        chosen = [task_lib.get_task(task_id, everything) for task_id in ids]
    elif split == "all":
        chosen = list(everything)
    else:
        train, val, _ = config_split(devops, everything)
        chosen = val if split == "val" else list({t.id: t for t in train}.values())  # a weighted task once
    if task_type is not None:
        if task_type not in task_lib.TASK_TYPES:
            raise UserError(f"--type: '{task_type}' is not a task type; one of {', '.join(task_lib.TASK_TYPES)}")
        chosen = [t for t in chosen if t.type == task_type]
    if difficulty is not None:
        if difficulty not in task_lib.DIFFICULTIES:
            raise UserError(f"--difficulty: '{difficulty}' is not one of {', '.join(task_lib.DIFFICULTIES)}")
        chosen = [t for t in chosen if t.difficulty == difficulty]
    if limit is not None:
        chosen = chosen[: max(0, limit)]
    if not chosen:
        raise UserError(f"no tasks match --split {split} --type {task_type} --difficulty {difficulty}; widen the selection")
    return chosen


@dataclass
class Progress:
    """One finished task, for progress displays."""

    done: int
    total: int
    task_id: str
    reward: float | None
    elapsed: float
    error: str | None


def run_eval(agent, task_list: list, results: ResultsFile, *, concurrency: int = 4,
             on_progress: Callable[[Progress], None] | None = None) -> dict:
    """Answer every task of `task_list` not yet done in `results`, `concurrency` at a time; returns the data.

    Per-task failures (5xx after retries, 4xx) are recorded and counted; a fatal error (401, 404,
    unreachable endpoint) or Ctrl-C stops the eval with what finished saved (status `interrupted`).
    """
    from core.agent.client import EndpointError

    pending = [t for t in task_list if t.id not in results.done_ids]
    total, done = len(task_list), len(task_list) - len(pending)
    base_wall = results.wall_time_s
    started = time.perf_counter()
    work: queue.Queue = queue.Queue()
    for task in pending:
        work.put(task)
    finished: queue.Queue = queue.Queue()
    stop = threading.Event()

    def worker() -> None:
        while not stop.is_set():
            try:
                task = work.get_nowait()
            except queue.Empty:
                return
            t0 = time.perf_counter()
            try:
                finished.put((task, agent.answer(task), None, 0.0))
            except EndpointError as exc:
                finished.put((task, None, str(exc), time.perf_counter() - t0))
            except BaseException as exc:  # fatal: hand it to the main thread, which stops everything
                finished.put((task, None, exc, time.perf_counter() - t0))
                return

    threads = [threading.Thread(target=worker, name=f"eval-{i}", daemon=True)
               for i in range(max(1, min(concurrency, len(pending))))]
    for thread in threads:
        thread.start()
    try:
        for _ in range(len(pending)):
            task, answer, error, elapsed = _next(finished, threads)
            if isinstance(error, BaseException):
                raise error
            results.add(result_entry(task, answer, error, elapsed), base_wall + time.perf_counter() - started)
            done += 1
            if error:
                log.warning("%s: failed: %s", task.id, error)
            if on_progress is not None:
                on_progress(Progress(done, total, task.id, answer.reward if answer else None,
                                     answer.elapsed if answer else elapsed, error))
    except BaseException:
        stop.set()
        results.finish("interrupted", base_wall + time.perf_counter() - started)
        raise
    results.finish("complete", base_wall + time.perf_counter() - started)
    return results.data


def _next(finished: queue.Queue, threads: list[threading.Thread]):
    """The next finished task; waits in short slices so Ctrl-C is handled promptly."""
    while True:
        try:
            return finished.get(timeout=0.2)
        except queue.Empty:
            if not any(t.is_alive() for t in threads) and finished.empty():
                raise RuntimeError("eval workers stopped without a result") from None


def _split_config(run_path: Path | None, task_paths: tuple[str, ...] = ()):
    """The `devops` section of a run's config, so `--split val` is the run's own held-out tasks (of its own task
    files); else the default preset's, the split a new training run would hold out. `task_paths` (`--tasks`)
    replace its task sources."""
    from core.training.config import config_from_yaml, load_config

    cfg = None
    if run_path is not None and (run_path / "config.yaml").is_file():
        try:
            cfg = config_from_yaml((run_path / "config.yaml").read_text(encoding="utf-8"), str(run_path / "config.yaml"))
        except UserError as exc:
            log.warning("%s; using the default preset's split", exc)
    cfg = cfg or load_config("default")
    if task_paths:
        cfg.devops.tasks = [{"path": path} for path in task_paths]
    return cfg.devops


def _resumed(settings: EvalSettings, results: ResultsFile) -> tuple[EvalSettings, tuple[Path, str | None] | None]:
    """The settings a resumed eval runs with: those it started with, unless the endpoint is given again; and for
    a `--local` eval, the checkpoint it started with (pinned, though the run saved newer ones since)."""
    saved = results.data.get("settings") or {}
    pinned = None
    changes: dict = {}
    if not settings.base_url and (not settings.local or settings.local == saved.get("local")):
        changes.update(base_url=saved.get("base_url"), local=saved.get("local"), model=settings.model or saved.get("model"))
        if saved.get("local") and saved.get("model_path") and Path(saved["model_path"]).is_dir():
            pinned = (Path(saved["model_path"]), saved.get("model"))
    for name in ("temperature", "max_tokens", "seed"):
        if getattr(settings, name) is None:
            changes[name] = saved.get(name)
    if not settings.tasks and saved.get("tasks"):
        changes["tasks"] = tuple(saved["tasks"])
    return dataclasses.replace(settings, **changes), pinned


def evaluate(settings: EvalSettings, *, on_start: Callable[[Path, int, int, str], None] | None = None,
             on_progress: Callable[[Progress], None] | None = None) -> tuple[Path, dict]:
    """The whole eval as `devops-rl eval` runs it; returns (results file, its data).

    `local` (a model folder, `builtin:tiny` or a run) is served in-process on 127.0.0.1 for the duration;
    `run` (or a run given as `local`) puts the results in the run's `eval/` folder. With `resume` the
    newest unfinished results file there (or `out`) is completed with the settings it was started with,
    unless the endpoint is given again.
    """
    import tasks as task_lib
    from core.agent.client import DEFAULT_MAX_TOKENS, DEFAULT_RETRIES, DEFAULT_TEMPERATURE, DEFAULT_TIMEOUT_S, DevOpsAgent
    from core.runs import find_run, resolve_run

    run_path = resolve_run(settings.run) if settings.run else find_run(settings.local) if settings.local else None
    run_path = run_path.resolve() if run_path is not None else None  # a bad --run is a one-line error above
    if run_path is not None and not settings.base_url and not settings.local:
        settings = dataclasses.replace(settings, local=str(run_path))
    folder = run_path / "eval" if run_path is not None else Path.cwd()
    out = settings.out
    if out is not None and (out.is_dir() or out.suffix != ".json"):
        folder, out = out, None

    pinned: tuple[Path, str | None] | None = None
    if settings.resume:
        path = out or find_resumable(folder)
        if path is None:
            raise UserError(f"--resume: no unfinished {RESULTS_PREFIX}*.json in {folder}; pass --out FILE or start a new eval")
        results = ResultsFile.load(path)
        settings, pinned = _resumed(settings, results)
        from tasks.sources import load_sources

        all_tasks = load_sources(list(settings.tasks) or None)
        task_list = [task_lib.get_task(task_id, all_tasks) for task_id in results.data.get("task_ids", [])]
    else:
        task_list = select_tasks(settings.split, settings.task_type, settings.difficulty, settings.task_ids, settings.limit,
                                 devops=_split_config(run_path, settings.tasks))
        results = None
    settings = dataclasses.replace(
        settings, temperature=DEFAULT_TEMPERATURE if settings.temperature is None else settings.temperature,
        max_tokens=DEFAULT_MAX_TOKENS if settings.max_tokens is None else settings.max_tokens)
    if not settings.base_url and not settings.local:
        raise UserError("no endpoint: pass --base-url URL --model NAME, or --local MODEL_OR_RUN (e.g. --local builtin:tiny)")
    if settings.base_url and not settings.model:
        raise UserError("--model: required with --base-url; the name the endpoint serves (see GET <base-url>/models)")
    check_writable(results.path.parent if results is not None else out.parent if out else folder,
                   "--out" if settings.out is not None else "results folder")

    server = None
    try:
        endpoint, model, concurrency, served = settings.base_url, settings.model, settings.concurrency, None
        if settings.local:
            from core.agent.inference import LocalModel
            from core.agent.served_model import ServedModel, resolve_served_model
            from core.agent.server import start_server

            served = (ServedModel(pinned[0], pinned[1] or pinned[0].name, settings.local) if pinned
                      else resolve_served_model(settings.local))
            log.info("loading %s from %s", served.name, served.path)
            server = start_server(LocalModel(served, device=settings.device), "127.0.0.1", 0)
            endpoint, model = server.base_url, served.name
            concurrency = 1  # the local server generates one answer at a time; more would only queue into timeouts
        agent = DevOpsAgent(endpoint, model, temperature=settings.temperature, max_tokens=settings.max_tokens,
                            timeout=DEFAULT_TIMEOUT_S if settings.timeout is None else settings.timeout,
                            retries=DEFAULT_RETRIES if settings.retries is None else settings.retries, seed=settings.seed)
        if results is None:
            record = settings.record(model=model, model_path=served.path if served else None, run_path=run_path,
                                     concurrency=concurrency)
            results = ResultsFile.create(out or new_results_path(folder), record, [t.id for t in task_list])
        if run_path is not None:  # a run's results that cannot go where asked go to the run first
            results.fallbacks.insert(0, run_path / "eval")
        if on_start is not None:
            on_start(results.path, len(task_list), len(results.done_ids), f"{model} at {endpoint}")
        data = run_eval(agent, task_list, results, concurrency=concurrency, on_progress=on_progress)
    finally:
        if server is not None:
            server.close()
    return results.path, data
