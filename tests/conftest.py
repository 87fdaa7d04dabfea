"""Test-wide settings: offline Hugging Face, and runs, cache and logs in temporary folders.

Also plain helpers any test can import: for bad-input checks run_cli, assert_user_error, snapshot_files; for the
cockpit's Pilot tests wait_for, text_of, write_task_files, write_eval_results.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True)
def _isolated_paths(tmp_path, monkeypatch):
    """Every test gets its own runs and log folders, so nothing leaks between tests or into ~."""
    monkeypatch.setenv("DEVOPS_RL_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("DEVOPS_RL_LOG_DIR", str(tmp_path / "logs"))


@pytest.fixture(scope="session", autouse=True)
def _shared_cache(tmp_path_factory):
    """One cache per test session (the built-in model is built once), shared by subprocesses."""
    if "DEVOPS_RL_CACHE_DIR" not in os.environ:
        os.environ["DEVOPS_RL_CACHE_DIR"] = str(tmp_path_factory.getbasetemp().parent / "devops-rl-cache")
    yield


# Plain helpers for bad-input tests of any command: import them with `from tests.conftest import ...`.

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`devops-rl ARGS` in a real subprocess (this checkout's code), with its exit code, stdout and stderr."""
    return subprocess.run([sys.executable, "-m", "core.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or REPO, env=env)


def assert_user_error(result, *fragments: str) -> str:
    """Exit code 2, exactly one `error: ...` line on stderr holding every fragment, no traceback anywhere.

    `result` is anything with `returncode`, `stdout` and `stderr` (a CompletedProcess); returns the error line.
    """
    shown = f"exit {result.returncode}\nstdout: {result.stdout[-1500:]}\nstderr: {result.stderr[-1500:]}"
    assert result.returncode == 2, shown
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, shown
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout, shown
    for fragment in fragments:
        assert fragment in errors[0], shown
    return errors[0]


def snapshot_files(*roots: Path) -> dict[Path, bytes]:
    """Every file under `roots` with its bytes, to show later that a command left them as they were."""
    return {path: path.read_bytes() for root in roots for path in sorted(Path(root).rglob("*")) if path.is_file()}


def assert_files_unchanged(before: dict[Path, bytes]) -> None:
    """Every file of an earlier `snapshot_files` still exists with the same bytes."""
    for path, content in before.items():
        assert path.is_file(), f"{path} is gone"
        assert path.read_bytes() == content, f"{path} changed"


def cli_in_process(capsys, *args: str):
    """`devops-rl ARGS` through `core.cli.main.main` in this process (no interpreter start-up: for long tables of
    cases), as an object with `returncode`, `stdout` and `stderr` like `run_cli`'s."""
    from types import SimpleNamespace

    from core.cli.main import main

    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    return SimpleNamespace(returncode=code, stdout=captured.out, stderr=captured.err)


class ChatEndpoint:
    """A real OpenAI-shaped chat server on 127.0.0.1 for client and eval tests (the stdlib's HTTP server).

    Its answers: `script` gives (status, headers) for the first requests; `fail(text, n)` gives a 500 for the
    n-th request about a user message; `delay` slows every answer; `raw` (content type, bytes) replaces every
    200 body; otherwise a chat completion of `text`. A failure without headers says `retry-after-ms: 1`, so
    the client's retries do not slow the tests. It records `requests`, their `times` and `auth_headers`, and
    `calls` per user message. HTTP/1.0, so `close()` really ends the service (no keep-alive outlives it).
    """

    def __init__(self, text: str, *, script=(), fail=lambda text, n: False, delay: float = 0.0,
                 raw: tuple[str, bytes] | None = None, models=("m",)) -> None:
        import json
        import threading
        import time
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.text, self.script, self.fail, self.delay, self.raw, self.models = text, list(script), fail, delay, raw, list(models)
        self.requests: list[dict] = []
        self.times: list[float] = []
        self.auth_headers: list[str] = []
        self.calls: dict[str, int] = {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _send(self, status: int, data: bytes, kind: str = "application/json", headers=()) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers:
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, message: str, headers=()) -> None:
                body = json.dumps({"error": {"message": message, "type": "server_error", "code": None}}).encode()
                self._send(status, body, headers=headers or (("retry-after-ms", "1"),))

            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                models = [{"id": m, "object": "model", "created": 0, "owned_by": "test"} for m in outer.models]
                self._send(200, json.dumps({"object": "list", "data": models}).encode())

            def do_POST(self) -> None:  # noqa: N802
                outer.times.append(time.monotonic())
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                outer.auth_headers.append(self.headers.get("Authorization", ""))
                asked = body["messages"][-1]["content"]
                outer.calls[asked] = outer.calls.get(asked, 0) + 1
                time.sleep(outer.delay)
                status, headers = outer.script.pop(0) if outer.script else (200, ())
                if status != 200:
                    self._error(status, f"scripted {status}", headers)
                elif outer.fail(asked, outer.calls[asked]):
                    self._error(500, "model crashed")
                elif outer.raw is not None:
                    self._send(200, outer.raw[1], outer.raw[0])
                else:
                    self._send(200, json.dumps({
                        "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": outer.text},
                                     "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 11, "completion_tokens": 22, "total_tokens": 33}}).encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.handle_error = lambda request, address: None  # a client killed mid-answer is what fault tests do
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def chat_endpoint():
    """Make `ChatEndpoint`s (same arguments); all are closed after the test."""
    made: list[ChatEndpoint] = []

    def make(text: str, **kwargs) -> ChatEndpoint:
        made.append(ChatEndpoint(text, **kwargs))
        return made[-1]

    yield make
    for server in made:
        server.close()


# ---- the cockpit's Pilot tests ----------------------------------------------------------------------

async def wait_for(pilot, condition, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)


def text_of(widget, width: int = 100) -> str:
    """What a Static shows, as plain text (a rich Table or Group rendered at `width`)."""
    from rich.console import Console

    console = Console(width=width, record=True, file=open(os.devnull, "w"))
    console.print(widget.content)
    return console.export_text()


TASKS_YAML = """
- id: {id}
  type: {type}
  difficulty: {difficulty}
  desc: {desc}
  expected_outputs: [alpha output, beta output, gamma output]
  reference_answer: |
    Use **{keyword}** with a rollback plan, monitoring and alerts.
"""


def write_task_files(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    specs = [
        ("k8s-001", "kubernetes", "easy", "Add readiness probes to a Deployment", "readinessProbe"),
        ("k8s-002", "kubernetes", "hard", "Roll out a canary with Argo Rollouts", "canary"),
        ("sec-001", "security", "medium", "Rotate a leaked database password", "rotation"),
        ("ci-001", "ci_cd", "easy", "Cache pip downloads in GitHub Actions", "actions/cache"),
    ]
    files = []
    for task_type in ("kubernetes", "security", "ci_cd"):
        path = folder / f"{task_type}.yaml"
        path.write_text("".join(TASKS_YAML.format(id=i, type=t, difficulty=d, desc=desc, keyword=k)
                                for i, t, d, desc, k in specs if t == task_type))
        files.append(path)
    return files


def write_eval_results(path: Path, rewards: dict[str, float]) -> None:
    """An eval results file as `devops-rl eval` writes it (its summary made by the eval's own code)."""
    from core.agent.results import summarize

    results = [{"task_id": task_id, "type": task_id.split("-")[0], "difficulty": "easy", "reward": reward,
                "breakdown": {"final_reward": reward, "dimensions": {"security": reward, "automation": reward / 2},
                              "penalties": {"repetition": 0.0}}}
               for task_id, reward in rewards.items()]
    path.write_text(json.dumps({"summary": summarize(results), "results": results}))
