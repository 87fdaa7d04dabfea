"""Evaluation: the agent answers a set of tasks concurrently; every answer is scored and saved as it lands.

The results file (`eval_results_<timestamp>.json`) is rewritten atomically after each task, so an
interrupted eval keeps what finished and `resume` completes it; `summarize` computes its `summary`.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from core.errors import UserError

log = logging.getLogger(__name__)

RESULTS_PREFIX = "eval_results_"
FORMAT_VERSION = 1
SPLITS = ("val", "train", "all")


def select_tasks(
    split: str = "val",
    task_type: str | None = None,
    difficulty: str | None = None,
    task_ids: Iterable[str] = (),
    limit: int | None = None,
    *,
    val_fraction: float = 0.2,
    seed: int = 0,
) -> list:
    """The tasks to evaluate: a split (as training splits them), optionally one type/difficulty, ids, a limit."""
    import tasks as task_lib

    if split not in SPLITS:
        raise UserError(f"--split: '{split}' is not one of {', '.join(SPLITS)}")
    everything = task_lib.load_tasks()
    ids = list(task_ids)
    if ids:
        chosen = [task_lib.get_task(task_id, everything) for task_id in ids]
    elif split == "all":
        chosen = list(everything)
    else:
        train, val = task_lib.split_tasks(everything, val_fraction=val_fraction, seed=seed)
        chosen = val if split == "val" else train
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


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


def summarize(results: list[dict], *, total: int | None = None, wall_time_s: float = 0.0) -> dict[str, Any]:
    """The `summary` of a results list: means overall, per type/difficulty/dimension/penalty, counts, tokens."""
    scored = [r for r in results if r.get("reward") is not None]
    by: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in ("type", "difficulty", "dimension", "penalty")}
    for entry in scored:
        by["type"][entry.get("type") or "?"].append(entry["reward"])
        by["difficulty"][entry.get("difficulty") or "?"].append(entry["reward"])
        breakdown = entry.get("breakdown") or {}
        for dim, value in (breakdown.get("dimensions") or {}).items():
            by["dimension"][dim].append(float(value))
        for pen, value in (breakdown.get("penalties") or {}).items():
            by["penalty"][pen].append(float(value))
    tokens = {"prompt": 0, "completion": 0, "total": 0}
    for entry in results:
        usage = entry.get("usage") or {}
        tokens["prompt"] += int(usage.get("prompt_tokens", 0))
        tokens["completion"] += int(usage.get("completion_tokens", 0))
        tokens["total"] += int(usage.get("total_tokens", 0))
    rewards = [r["reward"] for r in scored]
    return {
        "mean_reward": _mean(rewards),
        "min_reward": min(rewards) if rewards else None,
        "max_reward": max(rewards) if rewards else None,
        "count": len(scored),
        "failures": len(results) - len(scored),
        "total": total if total is not None else len(results),
        "by_type": {k: _mean(v) for k, v in sorted(by["type"].items())},
        "count_by_type": {k: len(v) for k, v in sorted(by["type"].items())},
        "by_difficulty": {k: _mean(v) for k, v in sorted(by["difficulty"].items())},
        "by_dimension": {k: _mean(v) for k, v in by["dimension"].items()},
        "by_penalty": {k: _mean(v) for k, v in by["penalty"].items()},
        "wall_time_s": round(wall_time_s, 3),
        "mean_elapsed_s": _mean([float(r.get("elapsed_seconds") or 0.0) for r in scored]),
        "tokens": tokens,
    }


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_results_path(folder: Path) -> Path:
    """`folder/eval_results_<UTC timestamp>.json`, unique even when two evals start in the same second."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    path = folder / f"{RESULTS_PREFIX}{stamp}.json"
    n = 1
    while path.exists():
        n += 1
        path = folder / f"{RESULTS_PREFIX}{stamp}-{n}.json"
    return path


class ResultsFile:
    """One eval's results on disk, always valid JSON: settings, planned task ids, summary and results."""

    def __init__(self, path: Path, data: dict) -> None:
        self.path = Path(path)
        self.data = data
        self._lock = threading.Lock()

    @classmethod
    def create(cls, path: Path, settings: dict, task_ids: list[str]) -> ResultsFile:
        if path.exists():
            raise UserError(f"--out: {path} already exists; pick another file or add --resume to complete it")
        data = {"format": FORMAT_VERSION, "status": "running", "created_at": _now_iso(), "updated_at": _now_iso(),
                "settings": settings, "task_ids": list(task_ids), "summary": summarize([], total=len(task_ids)), "results": []}
        return cls(path, data)  # written with the first result, so a fatal first request leaves no file

    @classmethod
    def load(cls, path: Path) -> ResultsFile:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UserError(f"{path}: no such results file; check the path") from None
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise UserError(f"{path}: not a readable eval results file ({exc}); start a new eval without --resume") from None
        if not isinstance(data, dict) or not isinstance(data.get("results"), list) or "summary" not in data:
            raise UserError(f"{path}: not an eval results file (no 'summary'/'results'); start a new eval without --resume")
        return cls(path, data)

    @property
    def done_ids(self) -> set[str]:
        """Tasks with a scored answer (failed ones are tried again on resume)."""
        return {r["task_id"] for r in self.data["results"] if r.get("reward") is not None}

    @property
    def wall_time_s(self) -> float:
        return float(self.data["summary"].get("wall_time_s") or 0.0)

    def add(self, entry: dict, wall_time_s: float) -> None:
        with self._lock:
            results = [r for r in self.data["results"] if r["task_id"] != entry["task_id"]]
            results.append(entry)
            self.data["results"] = results
            self._update(wall_time_s)
            self.save()

    def finish(self, status: str, wall_time_s: float) -> None:
        with self._lock:
            if status != "complete" and not self.data["results"] and not self.path.exists():
                return
            self.data["status"] = status
            self._update(wall_time_s)
            self.save()

    def _update(self, wall_time_s: float) -> None:
        order = {task_id: i for i, task_id in enumerate(self.data.get("task_ids", []))}
        self.data["results"].sort(key=lambda r: order.get(r["task_id"], len(order)))
        self.data["updated_at"] = _now_iso()
        self.data["summary"] = summarize(self.data["results"], total=len(self.data.get("task_ids", [])), wall_time_s=wall_time_s)

    def to_json(self) -> str:
        """One line per top-level key and per result: readable, and fast (the C encoder; `indent` is pure Python)."""
        head = [f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in self.data.items() if k != "results"]
        results = ",\n".join(json.dumps(r, ensure_ascii=False) for r in self.data["results"])
        return "{\n" + ",\n".join(head) + ',\n"results": [\n' + results + "\n]}\n"

    def save(self) -> None:
        """Write the whole file atomically (temp file, fsync, rename): a crash leaves the previous version."""
        from core.files import write_atomic
        from core.log import mask_secrets

        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, mask_secrets(self.to_json(), patterns=False))  # the environment's API keys


def find_resumable(folder: Path) -> Path | None:
    """The newest results file in `folder` that did not complete."""
    for path in sorted(folder.glob(f"{RESULTS_PREFIX}*.json"), reverse=True):
        try:
            status = json.loads(path.read_text(encoding="utf-8")).get("status")
        except (OSError, ValueError):
            continue
        if status != "complete":
            return path
    return None


@dataclass
class Progress:
    """One finished task, for progress displays."""

    done: int
    total: int
    task_id: str
    reward: float | None
    elapsed: float
    error: str | None


def result_entry(task, answer=None, error: str | None = None, elapsed: float = 0.0) -> dict[str, Any]:
    """One `results` entry: task id/type/difficulty, reward, breakdown, elapsed seconds, answer, usage."""
    entry: dict[str, Any] = {"task_id": task.id, "type": task.type, "difficulty": task.difficulty}
    if answer is not None:
        entry.update(reward=round(float(answer.breakdown.final_reward), 6), breakdown=answer.breakdown.to_dict(),
                     elapsed_seconds=round(answer.elapsed, 3), answer=answer.text, usage=answer.usage,
                     finish_reason=answer.finish_reason)
    else:
        entry.update(reward=None, breakdown=None, elapsed_seconds=round(elapsed, 3), answer=None, usage={}, error=error)
    return entry


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

    threads = [threading.Thread(target=worker, name=f"eval-{i}", daemon=True) for i in range(max(1, min(concurrency, len(pending))))]
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


def _split_params(run_path: Path | None) -> tuple[float, int]:
    """(val_fraction, seed) of a run's config, so `--split val` is the run's own held-out tasks; else the
    default preset's, the split a new training run would hold out."""
    from core.training.config import config_from_yaml, load_config

    cfg = None
    if run_path is not None and (run_path / "config.yaml").is_file():
        try:
            cfg = config_from_yaml((run_path / "config.yaml").read_text(encoding="utf-8"), str(run_path / "config.yaml"))
        except UserError as exc:
            log.warning("%s; using the default preset's split", exc)
    cfg = cfg or load_config("default")
    return float(cfg.devops.val_fraction), int(cfg.devops.seed)


def evaluate(
    *,
    base_url: str | None = None,
    model: str | None = None,
    local: str | None = None,
    run: str | None = None,
    split: str = "val",
    task_type: str | None = None,
    difficulty: str | None = None,
    task_ids: Iterable[str] = (),
    limit: int | None = None,
    concurrency: int = 4,
    temperature: float | None = None,
    max_tokens: int | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    backoff: float = 1.0,
    seed: int | None = None,
    out: Path | None = None,
    resume: bool = False,
    device: str = "auto",
    on_start: Callable[[Path, int, int, str], None] | None = None,
    on_progress: Callable[[Progress], None] | None = None,
) -> tuple[Path, dict]:
    """The whole eval as `devops-rl eval` runs it; returns (results file, its data).

    `local` (a model folder, `builtin:tiny` or a run) is served in-process on 127.0.0.1 for the duration;
    `run` (or a run given as `local`) puts the results in the run's `eval/` folder. With `resume` the
    newest unfinished results file there (or `out`) is completed with the settings it was started with,
    unless the endpoint is given again.
    """
    from core.agent.client import DEFAULT_MAX_TOKENS, DEFAULT_RETRIES, DEFAULT_TEMPERATURE, DEFAULT_TIMEOUT_S, DevOpsAgent

    import tasks as task_lib
    from core.log import mask_secrets
    from core.runs import find_run, resolve_run

    if base_url and local:
        raise UserError("--base-url and --local both given; pick one endpoint")
    if concurrency < 1:
        raise UserError(f"--concurrency: {concurrency} must be at least 1")
    run_path = resolve_run(run) if run else find_run(local) if local else None  # a bad --run: one-line error
    run_path = run_path.resolve() if run_path is not None else None
    if run_path is not None and not base_url and not local:
        local = str(run_path)
    folder = run_path / "eval" if run_path is not None else Path.cwd()
    if out is not None and (out.is_dir() or out.suffix != ".json"):
        folder, out = out, None

    pinned: tuple[Path, str | None] | None = None  # a resumed --local eval serves the checkpoint it started with
    if resume:
        path = out or find_resumable(folder)
        if path is None:
            raise UserError(f"--resume: no unfinished {RESULTS_PREFIX}*.json in {folder}; pass --out FILE or start a new eval")
        results = ResultsFile.load(path)
        saved = results.data.get("settings", {})
        if not base_url and (not local or local == saved.get("local")):  # the same endpoint as it started with
            base_url, local = saved.get("base_url"), saved.get("local")
            model = model or saved.get("model")
            if local and saved.get("model_path") and Path(saved["model_path"]).is_dir():
                pinned = (Path(saved["model_path"]), saved.get("model"))
        temperature = saved.get("temperature") if temperature is None else temperature
        max_tokens = saved.get("max_tokens") if max_tokens is None else max_tokens
        seed = saved.get("seed") if seed is None else seed
        all_tasks = task_lib.load_tasks()
        task_list = [task_lib.get_task(task_id, all_tasks) for task_id in results.data.get("task_ids", [])]
    else:
        val_fraction, split_seed = _split_params(run_path)
        task_list = select_tasks(split, task_type, difficulty, task_ids, limit, val_fraction=val_fraction, seed=split_seed)
        results = None
    temperature = DEFAULT_TEMPERATURE if temperature is None else temperature
    max_tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    if not base_url and not local:
        raise UserError("no endpoint: pass --base-url URL --model NAME, or --local MODEL_OR_RUN (e.g. --local builtin:tiny)")
    if base_url and not model:
        raise UserError("--model: required with --base-url; the name the endpoint serves (see GET <base-url>/models)")

    server = None
    try:
        if local:
            from core.agent.server import LocalModel, ServedModel, resolve_served_model, start_server

            served = ServedModel(pinned[0], pinned[1] or pinned[0].name, local) if pinned else resolve_served_model(local)
            log.info("loading %s from %s", served.name, served.path)
            server = start_server(LocalModel(served, device=device), "127.0.0.1", 0)
            endpoint, model = server.base_url, served.name
            concurrency = 1  # the local server generates one answer at a time; more would only queue into timeouts
        else:
            endpoint = base_url
        agent = DevOpsAgent(endpoint, model, temperature=temperature, max_tokens=max_tokens,
                            timeout=DEFAULT_TIMEOUT_S if timeout is None else timeout,
                            retries=DEFAULT_RETRIES if retries is None else retries, backoff=backoff, seed=seed)
        if results is None:
            settings = {"base_url": None if local else mask_secrets(base_url), "model": model, "local": local,
                        "model_path": str(served.path) if local else None,
                        "run": str(run_path) if run_path else None, "split": split if not task_ids else "ids",
                        "type": task_type, "difficulty": difficulty, "limit": limit, "temperature": temperature,
                        "max_tokens": max_tokens, "seed": seed, "concurrency": concurrency}
            results = ResultsFile.create(out or new_results_path(folder), settings, [t.id for t in task_list])
        if on_start is not None:
            on_start(results.path, len(task_list), len(results.done_ids), f"{model} at {endpoint}")
        data = run_eval(agent, task_list, results, concurrency=concurrency, on_progress=on_progress)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    return results.path, data
