"""Bad input to `eval`, `compare` and `serve`, as a new user types it: every case is one `error:` line, exit 2,
no traceback, and the results files and runs already on disk are byte-identical afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import assert_files_unchanged, assert_user_error, run_cli, snapshot_files

NOWHERE = "http://127.0.0.1:9/v1"  # never contacted: every case fails before a request
ENDPOINT = ("--base-url", NOWHERE, "--model", "m")


def _good_results(path: Path) -> Path:
    import tasks
    from core.agent.client import AgentAnswer
    from core.agent.results import ResultsFile, result_entry
    from core.rewards import score

    task = tasks.load_tasks()[0]
    results = ResultsFile.create(path, {"model": "m"}, [task.id])
    results.add(result_entry(task, AgentAnswer("Use Docker.", score("Use Docker.", task), {"total_tokens": 3}, 1.0)), 1.0)
    results.finish("complete", 1.0)
    return path


def _with(path: Path, change) -> Path:
    """A copy of the good results file with one value of the wrong type."""
    data = json.loads((path.parent / "good.json").read_text())
    change(data)
    path.write_text(json.dumps(data))
    return path


def _read_only_folder(tmp: Path) -> Path:
    """A folder nobody can create files in: chmod for a normal user; sysfs for root (it refuses even root)."""
    if os.geteuid() == 0:
        return Path("/sys")
    folder = tmp / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    return folder


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """The files the cases point at: good results, broken ones, a file where a folder is expected, a run."""
    root = tmp_path_factory.mktemp("bad-input")
    good = _good_results(root / "good.json")
    (root / "existing.json").write_bytes(good.read_bytes())
    (root / "not-json.json").write_text("{this is not json")
    (root / "list.json").write_text("[1, 2, 3]")
    (root / "empty.json").write_text("")
    (root / "binary.json").write_bytes(bytes(range(256)) * 4)
    (root / "latin1.json").write_bytes('{"summary": {}, "results": [], "note": "caf\xe9"}'.encode("latin-1"))
    (root / "a-file.txt").write_text("not a folder")
    (root / "a-folder.json").mkdir()
    _with(root / "reward-string.json", lambda d: d["results"][0].update(reward="high"))
    _with(root / "entry-not-object.json", lambda d: d.update(results=[1]))
    _with(root / "task-id-int.json", lambda d: d["results"][0].update(task_id=7))
    _with(root / "dimensions-list.json", lambda d: d["results"][0]["breakdown"].update(dimensions=[0.5]))
    _with(root / "summary-list.json", lambda d: d.update(summary=[1]))
    _with(root / "by-type-string.json", lambda d: d["summary"].update(by_type={"kubernetes": "good"}))
    _with(root / "count-float.json", lambda d: d["summary"].update(count=1.5))
    _with(root / "unfinished-wrong-types.json", lambda d: d.update(status="running", results=[{"task_id": None}]))
    run = root / "runs" / "20260101-000000-ci-fast-dead"
    (run / "checkpoints" / "global_step_1").mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({"run_id": run.name, "status": "finished"}))
    (root / "no-model").mkdir()
    (root / "broken-model").mkdir()
    (root / "broken-model" / "config.json").write_text("{not json")
    return root


# (command line with {data} and {ro} placeholders, fragments of the one error line)
CASES = [
    # eval: settings
    (["eval", *ENDPOINT, "--timeout", "-1"], ["--timeout: -1.0 must be a positive number"]),
    (["eval", *ENDPOINT, "--timeout", "0"], ["--timeout: 0.0 must be a positive number"]),
    (["eval", *ENDPOINT, "--timeout", "nan"], ["--timeout: nan"]),
    (["eval", *ENDPOINT, "--concurrency", "0"], ["--concurrency: 0 must be at least 1"]),
    (["eval", *ENDPOINT, "--limit", "0"], ["--limit: 0 must be at least 1"]),
    (["eval", *ENDPOINT, "--max-tokens", "0"], ["--max-tokens: 0 must be at least 1"]),
    (["eval", *ENDPOINT, "--temperature", "2.5"], ["--temperature: 2.5 is outside [0, 2]"]),
    (["eval", *ENDPOINT, "--retries", "-1"], ["--retries: -1 must be 0 or more"]),
    (["eval", *ENDPOINT, "--seed", "abc"], ["Invalid value for '--seed'"]),
    (["eval", *ENDPOINT, "--split", "test"], ["--split: 'test' is not one of val, train, all"]),
    (["eval", *ENDPOINT, "--type", "k8s"], ["--type: 'k8s' is not a task type"]),
    (["eval", *ENDPOINT, "--difficulty", "extreme"], ["--difficulty: 'extreme'"]),
    (["eval", *ENDPOINT, "--task", "no-such-task"], ["no-such-task"]),
    (["eval", "--base-url", "ftp://example.com", "--model", "m"], ["--base-url: 'ftp://example.com' is not an http(s) URL"]),
    (["eval", "--base-url", NOWHERE, "--local", "builtin:tiny"], ["--base-url and --local both given"]),
    (["eval", "--base-url", NOWHERE], ["--model: required with --base-url"]),
    (["eval", "--model", "m"], ["no endpoint: pass --base-url URL --model NAME"]),
    (["eval", "--local", "builtin:tiny", "--device", "tpu"], ["--device: 'tpu' is not one of auto, cpu, cuda"]),
    (["eval", "--local", "nowhere/model"], ["'nowhere/model' is not in the local Hugging Face cache"]),
    (["eval", "--run", "no-such-run"], ["no run 'no-such-run'"]),
    # eval: where the results go, and what --resume reads
    (["eval", *ENDPOINT, "--out", "{data}/existing.json"], ["existing.json already exists"]),
    (["eval", *ENDPOINT, "--out", "{data}/a-file.txt/results.json"], ["a-file.txt is a file, not a folder"]),
    (["eval", *ENDPOINT, "--out", "{ro}/devops-rl-results.json"], ["--out", "cannot write there"]),
    (["eval", "--resume", "--model", "m"], ["--resume: no unfinished eval_results_*.json in"]),
    (["eval", "--resume", "--out", "{data}/not-json.json"], ["not-json.json: not readable JSON", "without --resume"]),
    (["eval", "--resume", "--out", "{data}/binary.json"], ["binary.json: not readable JSON"]),
    (["eval", "--resume", "--out", "{data}/latin1.json"], ["latin1.json: not readable JSON"]),
    (["eval", "--resume", "--out", "{data}/empty.json"], ["empty.json: not readable JSON"]),
    (["eval", "--resume", "--out", "{data}/list.json"], ["list.json: not an eval results file"]),
    (["eval", "--resume", "--out", "{data}/unfinished-wrong-types.json"], ["results[0].task_id: input should be a valid string"]),
    (["eval", "--resume", "--out", "{data}/missing.json"], ["missing.json: no such file"]),
    # compare
    (["compare", "{data}/missing.json", "{data}/good.json"], ["missing.json: no such file"]),
    (["compare", "{data}/good.json", "{data}/not-json.json"], ["not-json.json: not readable JSON"]),
    (["compare", "{data}/list.json", "{data}/good.json"], ["list.json: not an eval results file"]),
    (["compare", "{data}/binary.json", "{data}/good.json"], ["binary.json: not readable JSON"]),
    (["compare", "{data}/latin1.json", "{data}/good.json"], ["latin1.json: not readable JSON"]),
    (["compare", "{data}/empty.json", "{data}/good.json"], ["empty.json: not readable JSON"]),
    (["compare", "{data}/a-folder.json", "{data}/good.json"], ["a-folder.json: is a folder"]),
    (["compare", "{data}/good.json", "{data}/reward-string.json"],
     ["results[0].reward: input should be a valid number", "'high'"]),
    (["compare", "{data}/entry-not-object.json", "{data}/good.json"], ["results[0]: input should be a valid dictionary"]),
    (["compare", "{data}/task-id-int.json", "{data}/good.json"], ["results[0].task_id: input should be a valid string"]),
    (["compare", "{data}/dimensions-list.json", "{data}/good.json"],
     ["results[0].breakdown.dimensions: input should be a valid dictionary"]),
    (["compare", "{data}/summary-list.json", "{data}/good.json"], ["summary-list.json: not an eval results file"]),
    (["compare", "{data}/by-type-string.json", "{data}/good.json"],
     ["summary.by_type.kubernetes: input should be a valid number"]),
    (["compare", "{data}/count-float.json", "{data}/good.json"], ["summary.count: input should be a valid integer"]),
    (["compare", "{data}/good.json", "{data}/good.json", "--top", "0"], ["--top"]),
    # serve
    (["serve", "builtin:tiny", "--host", "0.0.0.0"], ["--host 0.0.0.0: serving beyond this machine needs --require-key"]),
    (["serve", "builtin:tiny", "--device", "tpu"], ["--device: 'tpu' is not one of auto, cpu, cuda"]),
    (["serve", "builtin:tiny", "--port", "70000"], ["--port"]),
    (["serve", "builtin:tiny", "--port", "-1"], ["--port"]),
    (["serve", "nowhere/model"], ["'nowhere/model' is not in the local Hugging Face cache"]),
    (["serve", " "], ["model: empty"]),
    (["serve", "{data}/runs/20260101-000000-ci-fast-dead"], ["no checkpoint with a model yet"]),
    (["serve", "{data}/no-model"], ["is not a model folder (no config.json)"]),
    (["serve", "{data}/broken-model"], ["broken-model: cannot load the model", "not a valid JSON file"]),
]


@pytest.mark.parametrize("args, fragments", CASES, ids=[" ".join(c[0])[:70] for c in CASES])
def test_bad_input_is_one_error_line_and_leaves_files_alone(data, tmp_path, args, fragments):
    ro = _read_only_folder(tmp_path)
    before = snapshot_files(data)
    argv = [a.format(data=data, ro=ro) for a in args]
    result = run_cli(*argv, cwd=tmp_path)
    assert_user_error(result, *fragments)
    assert_files_unchanged(before)
    assert not list(tmp_path.glob("eval_results_*.json"))  # nothing half-written where the eval ran


def test_require_key_without_a_key_in_the_environment(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "DEVOPS_RL_API_KEY")}
    assert_user_error(run_cli("serve", "builtin:tiny", "--require-key", env=env, cwd=tmp_path),
                      "--require-key: set DEVOPS_RL_API_KEY or OPENAI_API_KEY")


def test_a_run_folder_copied_without_its_checkpoints_is_refused_by_eval(data, tmp_path):
    run = tmp_path / "run-copy"
    shutil.copytree(data / "runs" / "20260101-000000-ci-fast-dead", run)
    shutil.rmtree(run / "checkpoints")
    assert_user_error(run_cli("eval", "--run", str(run), "--limit", "1", cwd=tmp_path), "no checkpoint with a model yet")
    assert not (run / "eval").exists()


# serve's request checks (`core.agent.chat_api.parse_request`, what the server runs on every body): values no model
# can honour are a 400 naming the parameter, never a 200. (body, the parameter named)
SERVE_BODIES = [
    ({"messages": [{"role": "user", "content": None}]}, "messages[0].content"),
    ({"messages": [{"role": "system", "content": "be brief"}, {"role": "assistant", "content": None}]},
     "messages[1].content"),
    ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10**30}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 2**31}, "max_completion_tokens"),
]


@pytest.mark.parametrize(("body", "param"), SERVE_BODIES, ids=[b[1] for b in SERVE_BODIES])
def test_serve_refuses_null_content_and_impossible_token_counts(body, param):
    from http import HTTPStatus

    from core.agent.chat_api import ApiError, parse_request

    with pytest.raises(ApiError) as caught:
        parse_request(json.dumps(body).encode(), "tiny", 1000)
    assert caught.value.status == HTTPStatus.BAD_REQUEST and caught.value.param == param, caught.value.message


def test_serve_still_takes_a_large_max_tokens_within_range_and_a_null_stop():
    from core.agent.chat_api import parse_request

    request = parse_request(json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2**31 - 1,
                                        "stop": None}).encode(), "tiny", 1000)
    assert request.max_tokens == 2**31 - 1
