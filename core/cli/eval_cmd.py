"""`devops-rl eval`, `devops-rl compare` and `devops-rl serve`: measure the agent, compare two results, serve a model.

Everything heavy (openai, torch, transformers) is imported inside the commands; the work lives in core/agent.
"""

from __future__ import annotations

import json
import logging
import sys
from contextlib import contextmanager
from pathlib import Path

import typer

from core.errors import UserError

log = logging.getLogger(__name__)

EVAL_HELP = """Evaluate the agent on the tasks through an OpenAI-compatible endpoint and write eval_results_<ts>.json.

Endpoint: --base-url URL --model NAME (OpenAI, vLLM, 'devops-rl serve'), or --local MODEL_OR_RUN to serve
builtin:tiny, a model folder or a run's latest checkpoint in-process. The API key comes from
DEVOPS_RL_API_KEY or OPENAI_API_KEY. Results go to the run's eval/ folder for a run (--run or --local RUN),
else the current folder or --out; they are saved after every task, and --resume completes an interrupted eval."""


def _print_summary(path: Path, data: dict) -> None:
    summary = data["summary"]
    _warn_failures(path, data)
    mean = summary["mean_reward"]
    print(f"mean reward {mean:.3f}" if mean is not None else "mean reward -", end="")
    print(f" over {summary['count']} tasks, {summary['failures']} failed, {summary['wall_time_s']:.1f}s, "
          f"{summary['tokens']['completion']} completion tokens")
    for title, key in (("type", "by_type"), ("difficulty", "by_difficulty"), ("dimension", "by_dimension")):
        parts = [f"{name} {value:.3f}" for name, value in summary[key].items() if value is not None]
        if parts:
            print(f"  by {title}: " + ", ".join(parts))
    print(f"results: {path}")


def _warn_failures(path: Path, data: dict) -> None:
    """One line on stderr when tasks failed: how many, the first error, and how to ask for them again."""
    failed = [r for r in data["results"] if r.get("reward") is None]
    if failed:
        print(f"warning: {len(failed)} of {len(data['task_ids'])} tasks failed (first: {failed[0]['task_id']}: "
              f"{failed[0].get('error')}); 'devops-rl eval --resume --out {path}' asks for them again", file=sys.stderr)


class _Reporter:
    """A rich progress bar on a TTY, one plain line per task otherwise; on stderr when stdout carries JSON."""

    def __init__(self, stream=None) -> None:
        self.stream = stream or sys.stdout
        self.bar = None
        self.task = None

    def start(self, path: Path, total: int, done: int, endpoint: str) -> None:
        from core.log import mask_secrets

        print(f"evaluating {total} tasks ({done} already done) with {mask_secrets(endpoint)} -> {path}", file=self.stream,
              flush=True)
        if self.stream.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("eval"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                TextColumn("{task.fields[last]}"), console=Console(file=self.stream))
            self.task = self.bar.add_task("eval", total=total, completed=done, last="")
            self.bar.start()

    def progress(self, p) -> None:
        what = f"reward {p.reward:.3f}" if p.reward is not None else f"failed: {p.error}"
        if self.bar is not None:
            self.bar.update(self.task, completed=p.done, last=f"{p.task_id} {what}")
        else:
            print(f"[{p.done}/{p.total}] {p.task_id} {what} ({p.elapsed:.1f}s)", file=self.stream, flush=True)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _check_device(device: str) -> None:
    if device not in ("auto", "cpu", "cuda"):
        raise UserError(f"--device: '{device}' is not one of auto, cpu, cuda")


@contextmanager
def _sigterm_as_interrupt():
    """SIGTERM stops an eval or a server like Ctrl-C: results are marked `interrupted`, generations stop, exit 130."""
    import signal
    import threading

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def eval_command(
    base_url: str | None = typer.Option(None, "--base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1"),
    model: str | None = typer.Option(None, "--model", help="Model name the endpoint serves (with --base-url)."),
    local: str | None = typer.Option(None, "--local",
                                     help="Serve this in-process: builtin:tiny, a model folder, or a run id/folder."),
    run: str | None = typer.Option(None, "--run",
                                   help="Store results in this run's eval/ folder "
                                        "(and serve its latest checkpoint if no endpoint is given)."),
    split: str = typer.Option("val", "--split",
                              help="val | train | all (as training splits them: the run's config, else the default preset)."),
    task_type: str | None = typer.Option(None, "--type", help="Only tasks of this type."),
    difficulty: str | None = typer.Option(None, "--difficulty", help="Only tasks of this difficulty (easy, medium, hard)."),
    task_ids: list[str] = typer.Option([], "--task", help="Only this task id (repeatable); overrides --split."),
    task_paths: list[Path] = typer.Option([], "--tasks", help="Task file (YAML/JSONL) or folder to evaluate on, instead "
                                          "of the run's or the built-in tasks (repeatable)."),
    limit: int | None = typer.Option(None, "--limit", help="At most this many tasks."),
    concurrency: int = typer.Option(4, "--concurrency", "-j", help="Requests in flight at once."),
    temperature: float | None = typer.Option(None, "--temperature", help="Sampling temperature (default 0.7)."),
    max_tokens: int | None = typer.Option(None, "--max-tokens", help="Max tokens per answer (default 2048)."),
    timeout: float | None = typer.Option(None, "--timeout", help="Seconds per request before it counts as failed (default 300)."),
    retries: int | None = typer.Option(None, "--retries",
                                       help="Retries on 408/409/429/5xx/connection errors, with backoff (default 4)."),
    seed: int | None = typer.Option(None, "--seed", help="Sampling seed sent with each request (servers that honour it)."),
    out: Path | None = typer.Option(None, "--out", help="Results file (.json) or folder."),
    resume: bool = typer.Option(False, "--resume", help="Complete the newest unfinished results file (or --out FILE)."),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda, for --local/--run models."),
    as_json: bool = typer.Option(False, "--json", help="Print only the summary as JSON on stdout (progress goes to stderr)."),
) -> int:
    from core.agent.evaluate import EvalSettings, evaluate
    from tasks.sources import option_paths

    _check_device(device)
    settings = EvalSettings(base_url=base_url, model=model, local=local, run=run, split=split, task_type=task_type,
                            difficulty=difficulty, task_ids=tuple(task_ids), limit=limit, concurrency=concurrency,
                            temperature=temperature, max_tokens=max_tokens, timeout=timeout, retries=retries, seed=seed,
                            out=out, resume=resume, device=device, tasks=tuple(option_paths(task_paths)))
    reporter = _Reporter(sys.stderr if as_json else sys.stdout)
    try:
        with _sigterm_as_interrupt():
            path, data = evaluate(settings, on_start=reporter.start, on_progress=reporter.progress)
    finally:
        reporter.stop()
    if as_json:
        _warn_failures(path, data)
        print(json.dumps({"results": str(path), "summary": data["summary"]}, indent=2))
    else:
        _print_summary(path, data)
    return 0


def compare_command(
    a: Path = typer.Argument(..., help="Results before (e.g. the baseline)."),
    b: Path = typer.Argument(..., help="Results after (e.g. the trained checkpoint)."),
    top: int = typer.Option(5, "--top", min=1, help="How many improved/regressed/lowest tasks to list."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
) -> int:
    from core.agent.compare import compare, format_comparison, load_results

    result = compare(load_results(a), load_results(b), top=top)
    print(json.dumps(result, indent=2) if as_json else format_comparison(result, str(a), str(b)))
    return 0


def serve_command(
    model: str = typer.Argument(...,
                                help="builtin:tiny, a model folder, a run id/folder (its latest checkpoint) or a cached HF id."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (loopback by default; others need --require-key)."),
    port: int = typer.Option(8000, "--port", min=0, max=65535, help="Port (0 picks a free one)."),
    require_key: bool = typer.Option(False, "--require-key",
                                     help="Require 'Authorization: Bearer <key>', "
                                          "the key read from DEVOPS_RL_API_KEY or OPENAI_API_KEY."),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda"),
) -> int:
    from core.agent.client import API_KEY_ENV_VARS, api_key_from_env
    from core.agent.inference import LocalModel
    from core.agent.served_model import resolve_served_model
    from core.agent.server import LOOPBACK_HOSTS, ChatServer

    key = None
    if require_key:
        key, _ = api_key_from_env()
        if key is None:
            raise UserError(f"--require-key: set {' or '.join(API_KEY_ENV_VARS)} to the key clients must send")
    elif host not in LOOPBACK_HOSTS:
        raise UserError(f"--host {host}: serving beyond this machine needs --require-key "
                        f"(key from {' or '.join(API_KEY_ENV_VARS)})")
    _check_device(device)
    with _sigterm_as_interrupt():
        served = resolve_served_model(model)
        server = ChatServer(LocalModel(served, device=device), host, port, key)
        print(f"serving '{served.name}' from {served.path} at {server.base_url} (key {'required' if key else 'not required'}); "
              "Ctrl-C stops", flush=True)
        try:
            server.serve_forever()
        finally:
            _close_server(server)
    return 0


def _close_server(server) -> None:
    """Stop the generations in flight and wait for their threads before the interpreter exits: a thread still
    inside torch at exit aborts the process ('terminate called without an active exception')."""
    import os
    import signal

    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}  # a second Ctrl-C waits too
    try:
        if not server.close():
            log.warning("a request did not stop within the grace time; exiting without waiting for it")
            logging.shutdown()
            os._exit(130)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def register(app: typer.Typer) -> None:
    app.command("eval", help=EVAL_HELP)(eval_command)
    app.command("compare", help="Compare two eval results files: deltas per type and dimension, "
                                "improved/regressed and weakest tasks.")(compare_command)
    app.command("serve", help="Serve a local model (builtin:tiny, a folder, a run's latest checkpoint) "
                              "as an OpenAI-compatible endpoint.")(serve_command)
